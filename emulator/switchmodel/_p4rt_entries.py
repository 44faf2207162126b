"""P4Runtime ``TableEntry`` messages ↔ the switch model's P4 table entries (P4Runtime v1.4
§8.4 bytestrings, §9.1 table entries), through one architecture's part of the name map.
Every rule the specification puts on an entry is checked on the way in, so what reaches a
table is what a switch would accept; on the way out an entry is written canonically
(shortest bytestrings, don't-care fields left out) for read-write symmetry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.rpc import code_pb2

from emulator.p4.tables import PRIORITY_KINDS, KeyField, Match, TableEntry
from emulator.switchmodel._p4rt_status import Reject, invalid

__all__ = ["Entries", "EntryKey", "canonical", "check_entry_fields", "check_values", "uint_of"]

# ---- bytestrings (§8.4) ----------------------------------------------------------------------

def uint_of(data: bytes, width: int, what: str) -> int:
    """A received ``bit<width>`` value.  Any length is accepted (leading zero bytes too, so a
    client padding to the field's width is understood), but not the empty string nor a value
    wider than the field, after its leading zero bits: both are OUT_OF_RANGE (§8.4)."""
    if not data:
        raise Reject(code_pb2.OUT_OF_RANGE, f"{what}: a bytestring must not be empty")
    value = int.from_bytes(data, "big")
    if value.bit_length() > width:
        raise Reject(code_pb2.OUT_OF_RANGE, f"{what}: 0x{value:x} does not fit in bit<{width}>")
    return value


def canonical(value: int) -> bytes:
    """The shortest bytestring of ``value`` (§8.4: what a reply carries, for read-write symmetry)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


# ---- field matches (§9.1.1) ------------------------------------------------------------------

def _in_key_order(info: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A table's match fields in key order (their P4Info IDs count from 1 in key order; the
    name map's JSON object is sorted by name)."""
    return sorted(info["match_fields"].items(), key=lambda kv: kv[1]["id"])


def _match(fm: Any, name: str, spec: dict[str, Any]) -> Match:
    """One ``FieldMatch``, checked against §9.1.1: the set kind is the field's kind, its
    bytestrings fit, a don't-care match is omitted (not sent), LPM host bits and ternary bits
    outside the mask are zero, a range is not empty."""
    kind, width = spec["match"], spec["bitwidth"]
    if fm.WhichOneof("field_match_type") != kind:
        raise invalid(f"match field {name} is {kind}, not {fm.WhichOneof('field_match_type')}")
    if kind == "exact":
        return Match(uint_of(fm.exact.value, width, name))
    if kind == "lpm":
        return _lpm(uint_of(fm.lpm.value, width, name), fm.lpm.prefix_len, name, width)
    if kind == "ternary":
        return _ternary(uint_of(fm.ternary.value, width, name), uint_of(fm.ternary.mask, width, f"{name} mask"), name,
                        width)
    if kind == "range":
        return _range(uint_of(fm.range.low, width, f"{name} low"), uint_of(fm.range.high, width, f"{name} high"),
                      name, width)
    raise invalid(f"match field {name}: {kind} matches are not supported")


def _lpm(value: int, plen: int, name: str, width: int) -> Match:
    if plen == 0:
        raise invalid(f"{name}: an LPM match with prefix length 0 is a don't-care match: omit the field")
    if not 0 < plen <= width:
        raise invalid(f"{name}: prefix length must be 1..{width}, not {plen}")
    if value & ((1 << (width - plen)) - 1):
        raise invalid(f"{name}: the bits after the /{plen} prefix must be zero (0x{value:x})")
    return Match(value, plen)


def _ternary(value: int, mask: int, name: str, width: int) -> Match:
    if mask == 0:
        raise invalid(f"{name}: a ternary match with mask 0 is a don't-care match: omit the field")
    if value & ~mask:
        raise invalid(f"{name}: value 0x{value:x} has bits outside mask 0x{mask:x}")
    return Match(value, mask)


def _range(low: int, high: int, name: str, width: int) -> Match:
    if low > high:
        raise invalid(f"{name}: range {low}..{high} is empty")
    if (low, high) == (0, (1 << width) - 1):
        raise invalid(f"{name}: a range of every value is a don't-care match: omit the field")
    return Match(low, high)


def _dont_care(spec: dict[str, Any]) -> Match:
    """What an omitted field matches (§9.1.1); an exact field has no don't-care."""
    kind = spec["match"]
    if kind in ("ternary", "lpm"):
        return Match(0, 0)
    if kind == "range":
        return Match(0, (1 << spec["bitwidth"]) - 1)
    raise invalid(f"exact match field {spec['name']} is missing (an exact field has no don't-care value)")


_RULES = {"lpm": _lpm, "ternary": _ternary, "range": _range}  # (value, arg, name, width) -> Match


def _is_dont_care(kind: str, width: int, m: Match) -> bool:
    if kind in ("ternary", "lpm"):
        return m.arg == 0
    return kind == "range" and (m.value, m.arg) == (0, (1 << width) - 1)


def _put_match(fm: Any, spec: dict[str, Any], m: Match) -> None:
    fm.field_id = spec["id"]
    width = spec["bitwidth"]
    if spec["match"] == "exact":
        fm.exact.value = canonical(m.value)
    elif spec["match"] == "lpm":
        fm.lpm.value = canonical(m.value)
        fm.lpm.prefix_len = width if m.arg is None else m.arg
    elif spec["match"] == "ternary":
        fm.ternary.value = canonical(m.value)
        fm.ternary.mask = canonical((1 << width) - 1 if m.arg is None else m.arg)
    else:
        fm.range.low = canonical(m.value)
        fm.range.high = canonical(m.value if m.arg is None else m.arg)


# ---- table entries (§9.1) ------------------------------------------------------------------------

@dataclass(frozen=True)
class EntryKey:
    """Where an entry lives: its table and its identity there (match and priority, §9.1)."""

    table: str
    match: tuple[Match, ...]
    priority: int


class Entries:
    """``TableEntry`` messages ↔ the model's P4 tables, through one architecture's part of
    the name map; every check of §9.1 on the way in."""

    def __init__(self, names: dict[str, Any]) -> None:
        self.tables: dict[str, dict[str, Any]] = names["tables"]
        self.actions: dict[str, dict[str, Any]] = names["actions"]
        self.table_by_id: dict[int, str] = {v["id"]: k for k, v in self.tables.items()}
        self.action_by_id: dict[int, str] = {v["id"]: k for k, v in self.actions.items()}
        # derived once, not per update: a 200K-entry write looks them up 200K times
        self._fields = {name: _in_key_order(info) for name, info in self.tables.items()}
        self._field_by_id = {name: {spec["id"]: (key, spec) for key, spec in fields}
                             for name, fields in self._fields.items()}
        self._kinds = {name: [spec["match"] for _k, spec in fields] for name, fields in self._fields.items()}
        self._params = {name: {p["id"]: (pname, p) for pname, p in info["params"].items()}
                        for name, info in self.actions.items()}

    def table(self, table_id: int) -> str:
        name = self.table_by_id.get(table_id)
        if name is None:
            raise Reject(code_pb2.NOT_FOUND, f"no table with id {table_id}")
        return name

    def key(self, te: Any, check_priority: bool = True) -> EntryKey:
        """The table and identity of ``te``: every field once, by a known id; exact fields
        present; priority set exactly when the key has a ternary, range or optional field."""
        name = self.table(te.table_id)
        fields, by_id = self._fields[name], self._field_by_id[name]
        given: dict[str, Match] = {}
        for fm in te.match:
            if fm.field_id not in by_id:
                raise invalid(f"table {name} has no match field with id {fm.field_id}")
            key, spec = by_id[fm.field_id]
            if key in given:
                raise invalid(f"match field {key} of table {name} is given twice")
            given[key] = _match(fm, key, spec)
        match = tuple(given[key] if key in given else _dont_care({**spec, "name": key}) for key, spec in fields)
        if check_priority:
            _check_priority(name, self._kinds[name], te.priority)
        return EntryKey(name, match, te.priority)

    def entry(self, te: Any) -> tuple[EntryKey, TableEntry]:
        """An INSERT or MODIFY: the key and the action with all its parameters (§9.1.2)."""
        key = self.key(te)
        if te.action.WhichOneof("type") != "action":
            raise invalid(f"table {key.table} is a direct table: its entries take an action "
                          f"(not {te.action.WhichOneof('type') or 'nothing'})")
        aname, params = self._action(key.table, te.action.action)
        return key, TableEntry(key.match, aname, params, key.priority)

    def _action(self, table: str, action: Any) -> tuple[str, dict[str, int]]:
        aname = self.action_by_id.get(action.action_id)
        if aname is None or aname not in self.tables[table]["actions"]:
            raise invalid(f"action {action.action_id} is not an action of table {table}")
        specs = self._params[aname]
        values: dict[str, int] = {}
        for prm in action.params:
            if prm.param_id not in specs:
                raise invalid(f"action {aname} has no parameter with id {prm.param_id}")
            pname, p = specs[prm.param_id]
            if pname in values:
                raise invalid(f"parameter {pname} of action {aname} is given twice")
            values[pname] = uint_of(prm.value, p["bitwidth"], f"{aname}.{pname}")
        if len(values) < len(specs):
            missing = sorted(pname for pname, _p in specs.values() if pname not in values)
            raise invalid(f"action {aname} needs parameter(s) {', '.join(missing)}")
        return aname, values

    def message(self, te: Any, table: str, entry: TableEntry) -> None:
        """``entry`` as a reply's ``TableEntry``: canonical bytestrings, don't-care fields left
        out (§9.1.1, read-write symmetry)."""
        info = self.tables[table]
        te.table_id = info["id"]
        te.priority = entry.priority
        for (_key, spec), m in zip(self._fields[table], entry.key, strict=True):
            if not _is_dont_care(spec["match"], spec["bitwidth"], m):
                _put_match(te.match.add(), spec, m)
        act = self.actions[entry.action]
        te.action.action.action_id = act["id"]
        for pname, p in sorted(act["params"].items(), key=lambda kv: kv[1]["id"]):
            prm = te.action.action.params.add()
            prm.param_id = p["id"]
            prm.value = canonical(entry.params[pname])


def _check_priority(table: str, kinds: list[str], priority: int) -> None:
    """§9.1: an entry has a priority exactly when its table's key has a ternary, range or
    optional field (the priority then decides between entries, whatever else the key has)."""
    if any(k in PRIORITY_KINDS for k in kinds):
        if priority <= 0:
            raise invalid(f"table {table} has a ternary, range or optional key: its entries need a priority > 0, "
                          f"not {priority}")
    elif priority != 0:
        raise invalid(f"table {table} has no ternary, range or optional key: priority must be 0, not {priority}")


def check_values(table: str, keys: Sequence[KeyField], match: Sequence[tuple[int, int | None]],
                 priority: int) -> None:
    """§9.1 on an entry given as values, not as a message (``nfc switch-model --entries``):
    the priority rule and each field's rule of §9.1.1 (no LPM host bits, no ternary value
    bits outside the mask, no empty range).  A don't-care match is the entries file's way to
    leave a field out, so it is not refused; raises Reject."""
    _check_priority(table, [k.match for k in keys], priority)
    for k, (value, arg) in zip(keys, match, strict=True):
        if k.match in _RULES and arg is not None and not _is_dont_care(k.match, k.width, Match(value, arg)):
            _RULES[k.match](value, arg, k.name, k.width)


def check_entry_fields(te: Any, idle: bool = False) -> None:
    """The parts of a ``TableEntry`` this device has no use for must be left unset (§9.1);
    ``idle``: the table keeps idle time, so an entry may carry an ``idle_timeout_ns`` (kept, read
    back, and reported in an IdleTimeoutNotification once the entry has been idle that long)."""
    if te.is_const:
        raise invalid("is_const must be false in a write")
    if te.HasField("time_since_last_hit"):
        raise invalid("time_since_last_hit is read, not written")
    if te.idle_timeout_ns and not idle:
        raise invalid("the table keeps no idle time (no idle_timeout property): idle_timeout_ns must be 0")
    if te.HasField("meter_config") or te.HasField("counter_data") or te.HasField("meter_counter_data"):
        raise invalid("the switch model's tables have no direct counters or meters")
