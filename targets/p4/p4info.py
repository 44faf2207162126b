"""P4Info for the generated switch program, built with the ``p4runtime`` package's
protobuf classes, and the name map that ties ``.nfp`` names to P4Runtime names and IDs.

What goes in follows p4c's P4Runtime serializer (``control-plane/p4RuntimeSerializer.cpp``
and ``p4RuntimeArchStandard.cpp``) on the syntax tree the generator prints:

* every table declared in a control and every action a table lists or a block calls (p4c's
  front end removes the others first), and every ``counter`` / ``meter``
  (v1model) or ``Counter`` / ``Meter`` (TNA, PSA) instance, with its unit (from the
  ``CounterType`` / ``MeterType`` constructor argument) and size; every ``register`` /
  ``Register`` with its cell width (``type_spec`` bitstring) and size;
* preamble names are fully qualified by the control (``NfcIngress.t``, ``Ingress.t``),
  aliases are the shortest unique dot-separated suffix among all names;
* action parameters and match fields count from 1 in declaration / key order, with bit
  widths from the tree's types (match fields: from ``key_widths`` when given, which must
  agree with the tree wherever the tree can type the key expression);
* a table refers to each of its actions once, has ``const_default_action_id`` only when
  its default action is ``const``, and an ``initial_default_action`` always;
* ``controller_packet_metadata`` for each header type annotated
  ``@controller_header("<name>")``: its fields in order, IDs from 1, and the type's
  annotations in the preamble.

Anything P4Runtime could not address unambiguously (a name declared twice, an action a
table lists but nobody declares, a direct counter without a table) raises ``P4InfoError``
naming it instead of being emitted.

IDs are p4c's: the ``P4Ids.Prefix`` of the entity kind in the top byte and Jenkins's
one-at-a-time hash of the fully qualified name (a controller header's: its type's name) in
the low 24 bits.  Within a kind, names are numbered in sorted order and a collision moves to
the next free value, so the same program always gets the same IDs, adding a table does not
renumber the rest, and the P4Info equals what p4c writes for the same program
(tests/test_switch_p4.py compares them where p4c is built).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from targets.p4 import syntax as p

__all__ = ["PREFIX", "P4InfoError", "build_p4info", "one_at_a_time", "p4info_text"]

_P4Ids = p4info_pb2.P4Ids
# P4Runtime spec §6.3 "ID allocation": the most significant byte names the entity type
# (p4info.proto, P4Ids.Prefix).
PREFIX: dict[str, int] = {
    "action": _P4Ids.ACTION,
    "table": _P4Ids.TABLE,
    "value_set": _P4Ids.VALUE_SET,
    "controller_header": _P4Ids.CONTROLLER_HEADER,
    "action_profile": _P4Ids.ACTION_PROFILE,
    "counter": _P4Ids.COUNTER,
    "direct_counter": _P4Ids.DIRECT_COUNTER,
    "meter": _P4Ids.METER,
    "direct_meter": _P4Ids.DIRECT_METER,
    "register": _P4Ids.REGISTER,
    "digest": _P4Ids.DIGEST,
}

_MATCH = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM,
          "ternary": p4info_pb2.MatchField.TERNARY, "range": p4info_pb2.MatchField.RANGE,
          "optional": p4info_pb2.MatchField.OPTIONAL}

# extern type → P4Info kind: v1model.p4 (counter, direct_counter, meter, direct_meter),
# tna.p4 / psa.p4 (Counter, DirectCounter, Meter, DirectMeter)
_COUNTERLIKE = {"counter": "counter", "Counter": "counter", "direct_counter": "direct_counter",
                "DirectCounter": "direct_counter", "meter": "meter", "Meter": "meter",
                "direct_meter": "direct_meter", "DirectMeter": "direct_meter"}
# the enum of the unit argument, and its members (lower-cased: v1model spells them
# ``packets``, TNA and PSA ``PACKETS``)
_COUNTER_ENUMS = frozenset({"CounterType", "CounterType_t", "PSA_CounterType_t"})
_METER_ENUMS = frozenset({"MeterType", "MeterType_t", "PSA_MeterType_t"})
_COUNTER_UNITS = {"packets": p4info_pb2.CounterSpec.PACKETS, "bytes": p4info_pb2.CounterSpec.BYTES,
                  "packets_and_bytes": p4info_pb2.CounterSpec.BOTH}
_METER_UNITS = {"packets": p4info_pb2.MeterSpec.PACKETS, "bytes": p4info_pb2.MeterSpec.BYTES}

# p4runtime >= 1.4 has Table.initial_default_action (p4c fills it for every table with a
# default action, const or not); older packages do not.
_HAS_INITIAL_DEFAULT = "initial_default_action" in p4info_pb2.Table.DESCRIPTOR.fields_by_name

_BOOL_OPS = frozenset({"==", "!=", "<", "<=", ">", ">=", "&&", "||"})


class P4InfoError(ValueError):
    """The syntax tree has something P4Runtime cannot describe unambiguously."""


# ---- types of the tree ---------------------------------------------------------------------------


class _Types:
    """Bit widths of types and (where the tree declares them) of expressions."""

    def __init__(self, prog: p.Program) -> None:
        self.records: dict[str, tuple[tuple[str, p.Type], ...]] = {}
        self.typedefs: dict[str, p.Type] = {}
        self.consts: dict[str, p.Type] = {}
        for d in prog.decls:
            if isinstance(d, p.HeaderType | p.Struct):
                self.records[d.name] = d.fields
            elif isinstance(d, p.Typedef):
                self.typedefs[d.name] = d.type
            elif isinstance(d, p.ConstDecl):
                self.consts[d.name] = d.type

    def resolve(self, t: p.Type) -> p.Type:
        seen: set[str] = set()
        while isinstance(t, p.TypeName) and not t.args and t.name in self.typedefs and t.name not in seen:
            seen.add(t.name)
            t = self.typedefs[t.name]
        return t

    def width(self, t: p.Type) -> int | None:
        t = self.resolve(t)
        if isinstance(t, p.Bits):
            return t.width
        if isinstance(t, p.Bool):
            return 1
        return None  # a header, struct or architecture type: not a scalar the tree sizes

    def type_of(self, e: p.Expr, env: dict[str, p.Type]) -> p.Type | None:
        match e:
            case p.Const():
                return p.Bits(e.width) if e.width > 0 else p.Bool() if e.width == 0 else None
            case p.Path():
                return env.get(e.name, self.consts.get(e.name))
            case p.Member():
                base = self.type_of(e.base, env)
                if base is None:
                    return None
                base = self.resolve(base)
                if isinstance(base, p.TypeName) and base.name in self.records:
                    return dict(self.records[base.name]).get(e.field)
                return None
            case p.Cast():
                return e.type
            case p.Slice():
                return p.Bits(e.hi - e.lo + 1)
            case p.Bin():
                if e.op in _BOOL_OPS:
                    return p.Bool()
                left, right = self.type_of(e.left, env), self.type_of(e.right, env)
                if e.op == "++":
                    lw = self.width(left) if left is not None else None
                    rw = self.width(right) if right is not None else None
                    return p.Bits(lw + rw) if lw is not None and rw is not None else None
                return left if left is not None or e.op in ("<<", ">>") else right
            case p.Un():
                return p.Bool() if e.op == "!" else self.type_of(e.operand, env)
            case p.Call():
                if isinstance(e.target, p.Member) and e.target.field == "isValid":
                    return p.Bool()
                return None
            case _:
                return None

    def expr_width(self, e: p.Expr, env: dict[str, p.Type]) -> int | None:
        t = self.type_of(e, env)
        return self.width(t) if t is not None else None


# ---- what goes into the P4Info -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Counterlike:
    kind: str  # "counter" or "meter"
    name: str  # fully qualified
    local: str
    unit: int  # CounterSpec.Unit or MeterSpec.Unit
    size: int


def _counterlike(qual: str, inst: p.Instance) -> _Counterlike | None:
    kind = _COUNTERLIKE.get(inst.type.name)
    if kind is None:
        return None  # hashes, checksums, ...: not P4Runtime entities
    full = f"{qual}.{inst.name}"
    if kind.startswith("direct_"):
        raise P4InfoError(f"{kind.replace('_', ' ')} '{full}' is not attached to a table (the syntax tree has no "
                          f"'counters' / 'meters' table property), so P4Runtime cannot address it")
    enums, units = (_COUNTER_ENUMS, _COUNTER_UNITS) if kind == "counter" else (_METER_ENUMS, _METER_UNITS)
    unit_names = [a.field.lower() for a in inst.args
                  if isinstance(a, p.Member) and isinstance(a.base, p.Path) and a.base.name in enums]
    if len(unit_names) != 1 or unit_names[0] not in units:
        raise P4InfoError(f"{kind} '{full}': cannot tell its unit from the constructor arguments")
    size = inst.args[0] if inst.args else None
    if not isinstance(size, p.Const) or size.width == 0 or size.value <= 0:
        raise P4InfoError(f"{kind} '{full}': its size (the first constructor argument) is not a positive constant")
    return _Counterlike(kind, full, inst.name, units[unit_names[0]], size.value)


# register externs: v1model.p4 ``register<T>(size)``, tna.p4 ``Register<T, I>(size[, initial])``
_REGISTERS = frozenset({"register", "Register"})


def _register(full: str, inst: p.Instance, types: _Types) -> tuple[int, int]:
    """(cell width, size) of a register instance."""
    width = types.width(inst.type.args[0]) if inst.type.args else None
    size = inst.args[0] if inst.args else None
    if width is None or not isinstance(size, p.Const) or size.width == 0 or size.value <= 0:
        raise P4InfoError(f"register '{full}': needs a bit<W> cell type and a positive constant size")
    return width, size.value


def _controller_name(h: p.HeaderType) -> str | None:
    notes = [a for a in h.annotations if a.name == "controller_header"]
    if not notes:
        return None
    if len(notes) > 1 or not notes[0].text:
        raise P4InfoError(f"header type '{h.name}': @controller_header needs exactly one non-empty name")
    return notes[0].text


def one_at_a_time(data: bytes) -> int:
    """Bob Jenkins's one-at-a-time hash (32 bits), which p4c hashes P4Info names with
    (control-plane/p4RuntimeSymbolTable.cpp, ``jenkinsOneAtATimeHash``)."""
    h = 0
    for byte in data:
        h = (h + byte) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


class _IdAllocator:
    """Ids as p4c assigns them: the kind's prefix in the top byte, the low 24 bits of the
    name's one-at-a-time hash below it, and the next free value on a collision (linear
    probing) -- so the names of a kind must be asked for in sorted order, as p4c walks them."""

    def __init__(self) -> None:
        self.used: set[int] = set()

    def get(self, kind: str, name: str) -> int:
        prefix = PREFIX[kind] << 24
        low = one_at_a_time(name.encode()) & 0xFFFFFF
        while (prefix | low) in self.used:
            low = (low + 1) & 0xFFFFFF
        ident = prefix | low
        self.used.add(ident)
        return ident


def _aliases(names: Iterable[str]) -> dict[str, str]:
    """The shortest dot-separated suffix of each name that no other name ends with (p4c's
    ``P4SymbolSuffixSet``); the whole name when it is a suffix of another."""
    unique = set(names)
    suffixes = Counter(tuple(n.split(".")[-k:]) for n in unique for k in range(1, n.count(".") + 2))
    out: dict[str, str] = {}
    for n in unique:
        parts = n.split(".")
        k = next((k for k in range(1, len(parts) + 1) if suffixes[tuple(parts[-k:])] < 2), len(parts))
        out[n] = ".".join(parts[-k:])
    return out


def _unique(names: Iterable[str], message: str) -> None:
    """Raise ``message`` (formatted with the name) for the first name that repeats."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise P4InfoError(message.format(name))
        seen.add(name)


# ---- the builder ---------------------------------------------------------------------------------


def build_p4info(prog: p.Program, arch: str,
                 key_widths: dict[str, list[int]] | None = None) -> tuple[Any, dict[str, Any]]:
    """P4Info of ``prog``, and the P4Runtime part of the name map.

    ``key_widths``: table name → the bit width of each key field, in key order (tables not
    in it get their widths from the tree's types).  Raises ``P4InfoError``."""
    types = _Types(prog)
    controls = [d for d in prog.decls if isinstance(d, p.Control)]
    # p4c's front end removes the actions nothing uses (RemoveUnusedDeclarations) before P4Info:
    # an action is listed when a table can run it or the control's apply block or an action calls it
    used = {(c.name, name) for c in controls for name in (
        *(n for t in c.locals if isinstance(t, p.Table) for n in t.actions),
        *p.called(c.apply), *(n for a in c.locals if isinstance(a, p.Action) for n in p.called(a.body)))}
    # p4c leaves out what is annotated @hidden (tables and actions the compiler made for itself)
    all_actions = [(c, a) for c in controls for a in c.locals if isinstance(a, p.Action) and not _hidden(a)]
    tables = [(c, t) for c in controls for t in c.locals if isinstance(t, p.Table) and not _hidden(t)]
    externs = [x for c in controls for i in c.locals if isinstance(i, p.Instance)
               if (x := _counterlike(c.name, i)) is not None]
    registers = [(f"{c.name}.{i.name}", i.name, *_register(f"{c.name}.{i.name}", i, types))
                 for c in controls for i in c.locals if isinstance(i, p.Instance) and i.type.name in _REGISTERS]
    packet_io = [(name, h) for h in prog.decls if isinstance(h, p.HeaderType)
                 if (name := _controller_name(h)) is not None]

    # one entry per name: p4c's checkForDuplicates, plus P4's one name per scope
    full: dict[str, list[str]] = {
        "action": [f"{c.name}.{a.name}" for c, a in all_actions],
        "table": [f"{c.name}.{t.name}" for c, t in tables],
        "counter": [x.name for x in externs if x.kind == "counter"],
        "meter": [x.name for x in externs if x.kind == "meter"],
        "register": [r[0] for r in registers],
        "controller_header": [h.name for _, h in packet_io],  # p4c hashes the header type's name
    }
    for kind, declared in full.items():
        _unique(declared, kind.replace("_", " ") + " '{}' is declared more than once")
    _unique([name for name, _ in packet_io], "controller header '{}' is declared more than once")
    _unique([n for kind in ("action", "table", "counter", "meter", "register") for n in full[kind]],
            "'{}' names more than one table, action, counter, meter or register")
    for kind, locals_ in (("action", [a.name for _, a in all_actions]), ("table", [t.name for _, t in tables]),
                          ("counter", [x.local for x in externs if x.kind == "counter"]),
                          ("meter", [x.local for x in externs if x.kind == "meter"]),
                          ("register", [r[1] for r in registers])):
        _unique(locals_, f"two controls each declare the {kind} '{{}}', and the name map keys {kind}s by that name")

    actions = [(c, a) for c, a in all_actions if (c.name, a.name) in used]
    full["action"] = [f"{c.name}.{a.name}" for c, a in actions]
    alloc = _IdAllocator()
    ids = {(kind, name): alloc.get(kind, name)
           for kind in sorted(full, key=lambda k: PREFIX[k]) for name in sorted(full[kind])}
    alias = _aliases([*(n for kind in ("action", "table", "counter", "meter", "register") for n in full[kind]),
                      *(h.name for _, h in packet_io)])

    info = p4info_pb2.P4Info()
    info.pkg_info.arch = arch
    info.type_info.SetInParent()  # p4c writes it, empty when the program names no P4Runtime types
    names: dict[str, Any] = {"tables": {}, "actions": {}, "counters": {}, "meters": {}, "registers": {},
                             "controller_packet_metadata": {}}

    action_decls: dict[tuple[str, str], p.Action] = {(c.name, a.name): a for c, a in actions}
    for c, t in tables:
        qname = f"{c.name}.{t.name}"
        pt = info.tables.add()
        pt.preamble.id, pt.preamble.name, pt.preamble.alias = ids["table", qname], qname, alias[qname]
        env = {prm.name: prm.type for prm in c.params}
        widths = _match_widths(qname, t, None if key_widths is None else key_widths.get(t.name), types, env)
        _unique([k.name for k in t.keys], f"table '{qname}' has two match fields named '{{}}'")
        fields = {}
        for i, (k, width) in enumerate(zip(t.keys, widths, strict=True), 1):
            mf = pt.match_fields.add()
            mf.id, mf.name, mf.bitwidth = i, k.name, width
            if k.match in _MATCH:
                mf.match_type = _MATCH[k.match]
            else:
                mf.other_match_type = k.match
            # "prefix": written as an lpm field's prefix length, sent as its ternary mask
            fields[k.name] = {"id": i, "bitwidth": width, "match": k.match} | ({"prefix": True} if k.prefix else {})
        _unique(t.actions, f"table '{qname}' lists action '{{}}' twice")
        for action_name in t.actions:
            if (c.name, action_name) not in action_decls:
                raise P4InfoError(f"table '{qname}' lists action '{action_name}', which control '{c.name}' "
                                  f"does not declare")
            pt.action_refs.add().id = ids["action", f"{c.name}.{action_name}"]
        if t.default_action not in t.actions:
            raise P4InfoError(f"table '{qname}': its default action '{t.default_action}' is not in its actions")
        default = action_decls[c.name, t.default_action]
        if default.params:
            raise P4InfoError(f"table '{qname}': default action '{default.name}' has control-plane parameters, "
                              f"which the printed 'default_action = {default.name}()' does not bind")
        default_id = ids["action", f"{c.name}.{t.default_action}"]
        if t.const_default:
            pt.const_default_action_id = default_id
        if _HAS_INITIAL_DEFAULT:
            pt.initial_default_action.action_id = default_id
        pt.size = t.size
        if t.idle:  # P4Runtime §9.1.10: the entries' idle time is read (time_since_last_hit) or notified
            pt.idle_timeout_behavior = p4info_pb2.Table.NOTIFY_CONTROL
        names["tables"][t.name] = {"id": pt.preamble.id, "name": qname, "match_fields": fields,
                                   "actions": list(t.actions), "default_action": t.default_action,
                                   "const_default_action": t.const_default, "size": t.size}

    for c, a in actions:
        qname = f"{c.name}.{a.name}"
        pa = info.actions.add()
        pa.preamble.id, pa.preamble.name, pa.preamble.alias = ids["action", qname], qname, alias[qname]
        _unique([pname for pname, _ in a.params], f"action '{qname}' has two parameters named '{{}}'")
        params = {}
        for i, (pname, ptype) in enumerate(a.params, 1):
            pwidth = types.width(ptype)
            if pwidth is None:
                raise P4InfoError(f"action '{qname}': parameter '{pname}' has a type without a known bit width")
            prm = pa.params.add()
            prm.id, prm.name, prm.bitwidth = i, pname, pwidth
            params[pname] = {"id": i, "bitwidth": pwidth}
        names["actions"][a.name] = {"id": pa.preamble.id, "name": qname, "params": params}

    for x in externs:
        entry = info.counters.add() if x.kind == "counter" else info.meters.add()
        entry.preamble.id, entry.preamble.name, entry.preamble.alias = ids[x.kind, x.name], x.name, alias[x.name]
        entry.spec.unit = x.unit
        entry.size = x.size
        unit = (p4info_pb2.CounterSpec if x.kind == "counter" else p4info_pb2.MeterSpec).Unit.Name(x.unit)
        names[f"{x.kind}s"][x.local] = {"id": entry.preamble.id, "name": x.name, "unit": unit, "size": x.size}

    for qname, local, width, size in registers:
        entry = info.registers.add()
        entry.preamble.id, entry.preamble.name, entry.preamble.alias = ids["register", qname], qname, alias[qname]
        entry.type_spec.bitstring.bit.bitwidth = width
        entry.size = size
        names["registers"][local] = {"id": entry.preamble.id, "name": qname, "bitwidth": width, "size": size}

    for cp_name, h in packet_io:
        cpm = info.controller_packet_metadata.add()
        # p4c: the annotation's name is both the preamble name and the alias
        cpm.preamble.id, cpm.preamble.name, cpm.preamble.alias = ids["controller_header", h.name], cp_name, cp_name
        # p4c: the header type's annotations but @name, @id and the documentation ones, as written in P4
        cpm.preamble.annotations.extend(a.source() for a in h.annotations
                                        if a.name not in ("name", "id", "brief", "description"))
        metadata = {}
        for i, (fname, ftype) in enumerate(h.fields, 1):
            fwidth = types.width(ftype)
            if fwidth is None:
                raise P4InfoError(f"controller header '{h.name}': field '{fname}' has a type without a known bit width")
            md = cpm.metadata.add()
            md.id, md.name, md.bitwidth = i, fname, fwidth
            metadata[fname] = {"id": i, "bitwidth": fwidth}
        names["controller_packet_metadata"][cp_name] = {"id": cpm.preamble.id, "header": h.name,
                                                        "metadata": metadata}
    return info, names


def _hidden(d: p.Action | p.Table) -> bool:
    return any(a.name == "hidden" for a in d.annotations)


def _match_widths(qname: str, t: p.Table, given: list[int] | None, types: _Types,
                  env: dict[str, p.Type]) -> list[int]:
    from_tree = [types.expr_width(k.expr, env) for k in t.keys]
    if given is None:
        unknown = [k.name for k, w in zip(t.keys, from_tree, strict=True) if w is None]
        if unknown:
            raise P4InfoError(f"table '{qname}': no bit width for key field(s) {', '.join(unknown)}")
        return [w for w in from_tree if w is not None]
    if len(given) != len(t.keys):
        raise P4InfoError(f"table '{qname}' has {len(t.keys)} key fields but {len(given)} key widths")
    for k, tree_width, width in zip(t.keys, from_tree, given, strict=True):
        if tree_width is not None and tree_width != width:
            raise P4InfoError(f"table '{qname}': key field '{k.name}' is {tree_width} bits wide in the P4 program "
                              f"but {width} in the key widths")
    return list(given)


def p4info_text(info: Any) -> str:
    return str(text_format.MessageToString(info))
