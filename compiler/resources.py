"""How much switch memory a table needs, from its key and value widths and entry count.

Model (per table; docs/partitioner.md explains it and its limits):

* exact match: an entry is ``key + value + 4`` bits (4 bits: valid + version, as
  bf-p4c's match overhead); entries pack into ``sram_bits``-wide words (several per word
  when narrow, several words per entry when wide); a block holds ``sram_words`` words;
  cuckoo hashing fills blocks to ``exact_load``.
* lpm / ternary / range: the key is stored in TCAM blocks of ``tcam_entries`` x
  ``tcam_bits`` (blocks chained for wider keys, range fields cost twice their width:
  range-to-ternary expansion); the value is action data in SRAM, packed into words.
* registers: ``size x width`` bits of SRAM; counters 64 bits per index (packets + bytes);
  meters 128 bits per index.

On a server, memory is bytes, from the layout the server profile's ``[memory]`` gives
(``server_memory``; stdlib/targets/dpdk_server.toml describes the DPDK runtime's, and
tests/test_server_memory.py checks it against the heap the server reports): the ``rte_hash`` of
the table's keys at the capacity its entries need (a control-plane table grows as it is loaded,
a data-plane state has its size and room for removed keys), value records when the values do
not fit the hash's data word, an LPM table's trie or a ternary table's classifier.  Not
counted: while a control-plane table grows, the copy it grows from (one table at a time; the
entries file sizes each table in one step from its first slots, at most 1,024).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from compiler import ir
from compiler.profiles import TargetSpec

__all__ = ["BUCKET_BITS", "ENTRY_OVERHEAD_BITS", "Blocks", "ServerMemory", "acl_chunks", "acl_table",
           "entries_per_unit", "entries_share", "register_blocks", "server_bytes", "server_capacity",
           "server_key_bytes", "server_memory", "server_share_bytes", "size_for_share", "table_blocks",
           "values_inline"]

ENTRY_OVERHEAD_BITS = 4
BUCKET_BITS = 8  # a shard's selector splits into at most 2^8 buckets, whole to each server (compiler/shard.py)


@dataclass(frozen=True, slots=True)
class Blocks:
    sram: int
    tcam: int

    def __add__(self, other: Blocks) -> Blocks:
        return Blocks(self.sram + other.sram, self.tcam + other.tcam)


def _words(bits: int, spec: TargetSpec) -> tuple[int, int]:
    """(entries per word, words per entry) for an entry of ``bits`` bits."""
    width = int(spec.res("sram_bits"))
    if bits <= width:
        return max(1, width // max(bits, 1)), 1
    return 1, math.ceil(bits / width)


def _sram_blocks(entries: int, bits: int, spec: TargetSpec, load: float = 1.0) -> int:
    if entries <= 0 or bits <= 0:
        return 0
    per_word, words = _words(bits, spec)
    per_block = int(spec.res("sram_words")) * per_word
    return math.ceil(entries / (per_block * load)) * words


def _tcam_key_bits(t: ir.Table) -> int:
    return sum(k.expr.width * (2 if k.match == "range" else 1) for k in t.keys)


def table_blocks(t: ir.Table, entries: int, spec: TargetSpec) -> Blocks:
    """SRAM and TCAM blocks ``entries`` entries of table ``t`` need on switch ``spec``."""
    if entries <= 0:
        return Blocks(0, 0)
    if t.match == "exact":
        bits = t.key_bits + t.value_bits + ENTRY_OVERHEAD_BITS
        return Blocks(_sram_blocks(entries, bits, spec, spec.resources.get("exact_load", 1.0)), 0)
    wide = math.ceil(_tcam_key_bits(t) / spec.res("tcam_bits"))
    deep = math.ceil(entries / spec.res("tcam_entries"))
    return Blocks(_sram_blocks(entries, t.value_bits + ENTRY_OVERHEAD_BITS, spec), wide * deep)


def entries_per_unit(t: ir.Table, spec: TargetSpec, unit: int = 1024) -> Blocks:
    """Blocks per ``unit`` entries, for tables whose switch share the solver sizes."""
    return table_blocks(t, unit, spec)


def register_blocks(width: int, size: int, spec: TargetSpec) -> int:
    return _sram_blocks(size, width, spec)


@dataclass(frozen=True, slots=True)
class ServerMemory:
    """Bytes of one table on a server, by what holds them."""

    hash: int  # the rte_hash of its keys at the capacity its entries need (the DPDK heap)
    records: int  # value records the data words point to (one per entry at most)
    search: int  # an LPM table's trie; a ternary / range table's classifier (rte_acl's context)

    @property
    def total(self) -> int:
        return self.hash + self.records + self.search


def server_key_bytes(t: ir.Table, unit: int) -> int:
    """The bytes of the table's hash key on a server, in ``unit``-byte steps: the key fields (an
    LPM table: and the prefix length byte); a ternary or range table's rule (a word, then a word
    per 32-bit chunk of its fields: values, masks / prefix lengths / high bounds, priority)."""
    raw = 8 + 8 * acl_chunks(t) if acl_table(t) else (t.key_bits + (8 if t.match == "lpm" else 0) + 7) // 8
    return max(unit, -(-raw // unit) * unit)


def acl_table(t: ir.Table) -> bool:
    """A ternary or range key field: the server classifies the table with rte_acl."""
    return t.match in ("ternary", "range")


def values_inline(t: ir.Table, memory: Mapping[str, float]) -> bool:
    """A control-plane table whose values fit the data word the server keeps them in (the
    profile's ``[memory]`` inline rooms: 64 bits; an LPM table's trie keeps 56, 55 in a trie of
    a field over 64 bits); others get a record each."""
    lpm = next((k for k in t.keys if k.match == "lpm"), None) if t.match == "lpm" else None
    room = memory["inline_value_bits"] if lpm is None else (
        memory["inline_lpm6_value_bits"] if lpm.expr.width > 64 else memory["inline_lpm_value_bits"])
    return not t.is_state and t.value_bits <= room


def acl_chunks(t: ir.Table) -> int:
    """The 32-bit chunks of a ternary or range table's key fields (rte_acl's fields)."""
    return sum((k.expr.width + 31) // 32 for k in t.keys)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _hash_bytes(entries: int, key_bytes: int, m: dict[str, float]) -> int:
    """An rte_hash of ``entries`` keys: its buckets, its key slots, its ring of free slots."""
    buckets = max(1, _pow2(entries) // int(m["hash_bucket_slots"]))
    align = int(m["hash_key_align"])
    slot = -(-(int(m["hash_key_header"]) + key_bytes) // align) * align
    return buckets * int(m["hash_bucket_bytes"]) + (entries + 1) * slot + _pow2(entries + 1) * int(m["hash_ring_slot"])


def _room(n: int) -> int:
    """The capacity that keeps ``n`` entries below 7/8 full (the runtime's room_for)."""
    return n + n // 7 + 1


def server_capacity(size: int) -> int:
    """The rte_hash capacity of a control-plane table loaded with its ``size`` entries: room
    for them below 7/8 full, at least 8, whether the entries file loads them in one step or
    ADDs do (the runtime's growth steps stop at that room while the table is within its size;
    fewer entries take no more).  Above ``hash_max_entries`` (rte_hash's most) no server can
    hold the table."""
    return max(8, _room(size))


def server_memory(t: ir.Table, spec: TargetSpec) -> ServerMemory:
    """The memory of table ``t`` on server ``spec`` with its ``size`` entries loaded."""
    m = spec.memory
    key = server_key_bytes(t, int(m["key_unit"]))
    words = sum(-(-v.width // 64) for v in t.values)
    header = int(m["malloc_overhead"])
    if t.is_state:
        cap = min(t.size, int(m["state_max"]))
        line = int(m["state_record_align"])
        record = -(-(words + int(m["state_record_words"])) * 8 // line) * line + header
        slots = cap + cap // int(m["state_room_div"]) + int(m["state_room_add"])
        return ServerMemory(_hash_bytes(slots, key, m), cap * record, 0)
    cap = server_capacity(t.size)
    records = 0 if values_inline(t, m) else t.size * ((words + int(m["record_words"])) * 8 + header)
    search = 0
    if t.match == "lpm":
        per_route = m["lpm_vrf_route_bytes"] if len(t.keys) > 1 else m["lpm_route_bytes"]
        search = int(m["lpm_root_bytes"]) + t.size * int(per_route)
    elif acl_table(t):
        search = t.size * int(m["acl_rule_bytes"] + m["acl_chunk_bytes"] * acl_chunks(t))
    return ServerMemory(_hash_bytes(cap, key, m), records, search)


def server_bytes(t: ir.Table, spec: TargetSpec) -> int:
    """Bytes of server memory for the full table (see module docstring)."""
    return server_memory(t, spec).total


def entries_share(size: int, servers: int) -> int:
    """The entries the most loaded of ``servers`` servers holds of ``size`` that a hash spreads
    over them: server i of n starts with the buckets [i * B / n, (i + 1) * B / n) of B, so the
    most loaded has ceil(B / n) (3 servers: 86 of 256, not a third), each bucket about size / B
    entries (rounded up).  What the server generator sizes such a table for, as the memory model
    prices it."""
    most, buckets = _most_buckets(servers)
    return -(-size * most // buckets)


def size_for_share(entries: int, servers: int) -> int:
    """The largest size whose share (``entries_share``) on ``servers`` servers is at most
    ``entries``: what a table split so may declare when one server holds ``entries``."""
    most, buckets = _most_buckets(servers)
    return entries * buckets // most


def _most_buckets(servers: int) -> tuple[int, int]:
    """(the buckets of the most loaded of ``servers`` servers, the buckets in all)."""
    buckets = 1 << BUCKET_BITS
    return -(-buckets // max(1, servers)), buckets


def server_share_bytes(t: ir.Table, spec: TargetSpec, servers: int) -> int:
    """Bytes of table ``t`` on each of ``servers`` servers that share its entries evenly: a
    control-plane table grows to its share; a state table's hash is made at its full size on
    each (the forwarding cores that insert cannot grow it), only its records are shared."""
    if servers <= 1:
        return server_bytes(t, spec)
    share = server_memory(replace(t, size=entries_share(t.size, servers)), spec)
    return server_memory(t, spec).hash + share.records if t.is_state else share.total
