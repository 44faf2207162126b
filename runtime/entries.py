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

Values are integers, dotted IPv4, colon MAC or hex strings.  Only the file format and
parsing live here; the caller puts entries where the plan says.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["EntriesError", "EntrySpec", "load_entries", "parse_value"]


class EntriesError(ValueError):
    """A malformed entries file; the message names the table and entry."""


@dataclass(frozen=True)
class EntrySpec:
    table: str
    match: dict[str, tuple[int, int | None]]  # key -> (value, prefix length / mask / high)
    values: dict[str, int]
    priority: int = 0


def parse_value(v: Any) -> int:
    if isinstance(v, bool):
        raise EntriesError(f"{v!r} is not a number")
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if s.count(".") == 3:
        return int(ipaddress.IPv4Address(s))
    if ":" in s and len(s.split(":")) == 6:
        return int(s.replace(":", ""), 16)
    if ":" in s:
        return int(ipaddress.IPv6Address(s))
    return int(s, 0)


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
                out.append(EntrySpec(str(table), {k: _match(v) for k, v in (item.get("match") or {}).items()},
                                     {k: parse_value(v) for k, v in (item.get("values") or {}).items()},
                                     int(item.get("priority", 0))))
            except (ValueError, AttributeError, TypeError) as err:
                raise EntriesError(f"{path}: {table} entry {i}: {err}") from err
    return out
