"""Table entries as data: the ``--entries`` file (YAML or JSON) of ``nfc run`` and of the
switch model's batch mode, in ``.nfp`` names.

    vni_to_qinq:
      - match: {vxlan_vni: 5000}
        values: {s_tag: 7, c_tag: 42, port: 3}
    underlay_routes:
      - match: {outer_ipv4_dst: 172.16.0.0/16}      # lpm: value/prefix length
        values: {port: 21, next_hop_mac: "02:00:00:00:00:99"}
    acl:
      - match: {ipv4_src: [10.0.0.0, 255.0.0.0], dport: "1000..2000"}   # ternary [value, mask]; range lo..hi
        priority: 10
        values: {action: 1}

Values are integers, dotted IPv4, colon MAC, IPv6 or hex strings.  An address keeps its
kind (:class:`Address`): it fits only a field of its own width, IPv4 ``bit<32>``, MAC
``bit<48>``, IPv6 ``bit<128>``, which the caller checks with ``parse_value(v, width)`` once
it knows the field.  Only the file format and parsing live here; the caller puts entries
where the plan says.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Address", "EntriesError", "EntrySpec", "load_entries", "parse_value"]


class EntriesError(ValueError):
    """A malformed entries file; the message names the table and entry."""


@dataclass(frozen=True)
class EntrySpec:
    table: str
    match: dict[str, tuple[int, int | None]]  # key -> (value, prefix length / mask / high)
    values: dict[str, int] = field(repr=False)  # values may be keys: never in a repr
    priority: int = 0


_MAC = re.compile(r"[0-9a-fA-F]{1,2}(?::[0-9a-fA-F]{1,2}){5}")


class Address(int):
    """An integer written as an address: it remembers its kind, whose width is the only field
    width it fits (an IPv6 address that happens to be small is still not a 32-bit value)."""

    kind: str
    bits: int
    text: str

    def __new__(cls, value: int, kind: str, bits: int, text: str) -> Address:
        self = super().__new__(cls, value)
        self.kind, self.bits, self.text = kind, bits, text
        return self

    def __repr__(self) -> str:  # messages show the address as written, not its integer
        return repr(self.text)

    def __str__(self) -> str:  # still the integer where a number is printed (int's str is its repr)
        return int.__repr__(self)


def _address(s: str) -> Address | None:
    if s.count(".") == 3 and ":" not in s:
        return Address(int(ipaddress.IPv4Address(s)), "an IPv4 address", 32, s)
    if _MAC.fullmatch(s):
        return Address(int.from_bytes(bytes(int(g, 16) for g in s.split(":")), "big"), "a MAC address", 48, s)
    if ":" in s:
        return Address(int(ipaddress.IPv6Address(s)), "an IPv6 address", 128, s)
    return None


def parse_value(v: Any, width: int | None = None) -> int:
    """An integer, or a string: dotted IPv4, colon MAC, IPv6, or a number in any Python base
    (``0x..``).  With ``width``, an address must be one of that width (ValueError if not)."""
    if isinstance(v, bool):
        raise EntriesError(f"{v!r} is not a number")
    if isinstance(v, int):
        value = v
    else:
        s = str(v).strip()
        addr = _address(s)  # "0.0.0.0" is a falsy Address: compare with None
        value = addr if addr is not None else int(s, 0)
    if width is not None and isinstance(value, Address) and value.bits != width:
        raise EntriesError(f"{v!r} is {value.kind} ({value.bits} bits): it does not fit a bit<{width}> field")
    return value


def _match(v: Any) -> tuple[int, int | None]:
    if isinstance(v, list) and len(v) == 2:
        return parse_value(v[0]), parse_value(v[1])
    s = str(v)
    if "/" in s:
        addr, plen = s.split("/")
        return parse_value(addr), int(plen)
    if ".." in s:
        lo, hi = s.split("..")
        return parse_value(lo), parse_value(hi)
    return parse_value(v), None


def _hidden(name: str, v: Any) -> int:
    """A value of an entries file; what is wrong with it is said without showing it (a value
    may be a key)."""
    try:
        return parse_value(v)
    except (ValueError, TypeError):
        raise EntriesError(f"value {name} is not a number or an address (values are not shown)") from None


def load_entries(path: str | Path) -> list[EntrySpec]:
    text = Path(path).read_text()
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise EntriesError(f"{path}: not valid YAML/JSON: {e}") from e
    if not isinstance(data, dict):
        raise EntriesError(f"{path}: must map table names to lists of entries")
    out: list[EntrySpec] = []
    for table, entries in data.items():
        for i, item in enumerate(entries or []):
            try:
                match = {k: _match(v) for k, v in (item.get("match") or {}).items()}
                values = {k: _hidden(k, v) for k, v in (item.get("values") or {}).items()}
                out.append(EntrySpec(str(table), match, values, int(item.get("priority", 0))))
            except (ValueError, AttributeError, TypeError) as err:
                raise EntriesError(f"{path}: {table} entry {i}: {err}") from err
    return out
