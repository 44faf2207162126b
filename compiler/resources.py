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

On a server, memory is bytes: a hash table slot costs the key padded to 16 bytes
plus the value, with 1/0.9 load-factor headroom; LPM as DIR-24-8 (rte_lpm) costs a
fixed 64 MiB plus 4 bytes per route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler import ir
from compiler.profiles import TargetSpec

__all__ = ["ENTRY_OVERHEAD_BITS", "Blocks", "entries_per_unit", "register_blocks", "server_bytes", "table_blocks"]

ENTRY_OVERHEAD_BITS = 4


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


def server_bytes(t: ir.Table) -> int:
    """Bytes of server memory for the full table (see module docstring)."""
    if t.match == "lpm" and len(t.keys) == 1 and t.keys[0].expr.width <= 32:
        return 64 * 2**20 + 4 * t.size
    key_bytes = max(16, math.ceil(t.key_bits / 8 / 16) * 16)
    value_bytes = math.ceil(t.value_bits / 8) + 8
    return math.ceil(t.size * (key_bytes + value_bytes) / 0.9)
