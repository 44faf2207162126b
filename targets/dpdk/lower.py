"""Placed IR → C for the server part (``nf.c``), on the packet model of ``nfc_rt.h``.

A packet arrives from the switch behind a switch→server bridge header:
``nfc_from_switch`` checks it (cut id, length), restores the bridged metadata and copies
the headers its validity bits name; ``nfc_run`` runs the server stages of that cut's
pipeline (for a cache-miss bridge: the cached stage against the full table);
``nfc_to_switch`` writes the server→switch bridge, the valid headers in packet order
(checksums recomputed) and the payload.  Header fields are read and written in place with
bit accessors, reads of an invalid header give 0 and writes to one do nothing, exactly as
the reference semantics says.  Exact-match tables are ``rte_hash`` tables (keys padded to
the server profile's ``key_unit``); constructs not supported yet raise ``Unsupported``.  Whatever the program, the
C builds under ``-Wall -Wextra -Werror`` (``tests/test_c_warnings.py``): no unused parameter,
variable, label or function, no read of a buffer being filled, no comparison of an unsigned
value with 0 that always holds or fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from compiler import ir
from compiler.analysis import (
    CRYPTO_REASON,
    Loc,
    changed_by,
    drop_reasons,
    expr_reads,
    order_free,
    punt_reasons,
    stage_units,
    stmt_writes,
    walk_expr,
    walk_stmts,
)
from compiler.ir import Span
from compiler.passes.names import reason_uses
from compiler.passes.validity import (
    may_step,
    must_be_valid,
    must_branches,
    must_step,
    packet_order,
    parser_may_extract,
    parser_state_must,
    reachable_states,
)
from compiler.placement import EGRESS, EGRESS_SET, Bridge, Direction, Placement, Segment, find_bridge
from compiler.resources import acl_chunks, acl_table, entries_share, server_key_bytes, values_inline
from targets.c import syntax as c
from targets.c.printer import string_literal
from targets.c.unused import names_used, void_unused_params
from targets.generator import GeneratorError
from targets.names import NameClash

__all__ = ["Server", "Unsupported", "lower_server"]

MAX_WIDTH = 128  # NFC_MAX_WIDTH: wider than 64 bits is nfc_u128 (unsigned __int128) in C
MAX_TABLES = 64  # NFC_MAX_TABLES
MAX_FIELDS = 16  # NFC_MAX_FIELDS
# what the server runtime counts its own drops under, beside the program's reasons in the counters'
# "drops" (nfc_control.c): no buffer to send a packet in (drops[0]), no DPDK port for its egress port
RUNTIME_DROPS = ("server_no_buffer", "server_no_port")
PUNT_BASE = 128  # NFC_PUNT_BASE: the codes of punt reasons (drop reasons are 1..127)
MAX_KEY = 64  # NFC_MAX_KEY: key bytes
MAX_LINKS = 4  # NFC_MAX_LINKS: state tables a switch-cached state's hit arm refreshes
ACL_CHUNKS = (MAX_KEY - 8) // 8  # 32-bit chunks of a ternary / range key whose rule key fits MAX_KEY
_MATCH = {"exact": "NFC_M_EXACT", "lpm": "NFC_M_LPM", "ternary": "NFC_M_TERNARY", "range": "NFC_M_RANGE"}
MAX_INST = 32  # NFC_MAX_INST: header instances of a packet
HITS_KEY = 32  # NFC_HITS_KEY: key bytes a hit sample keeps
PRE_TABLES = 8  # at most: the first PRE_TABLES tables' bulk lookup answers are kept per packet (NFC_PRE_TABLES)
PRE_KEY = 32  # at most: a kept answer's key bytes (NFC_PRE_KEY, nfc_prog.h sizes both to the program)
MAX_HDR = 64  # NFC_MAX_HDR: bytes of one header


class Unsupported(GeneratorError):
    """A construct the DPDK generator does not lower (yet)."""


def _src(span: Span) -> str:
    return f"{span.file}:{span.line}"


def _mask(width: int) -> c.Expr:
    return _const((1 << min(width, MAX_WIDTH)) - 1)


def _const(value: int) -> c.Expr:
    """A number as C has it: a 64-bit literal, or NFC_U128(high, low) above 64 bits."""
    if value >> 64:
        return c.Call("NFC_U128", (c.Int(value >> 64, "ull"), c.Int(value & ((1 << 64) - 1), "ull")))
    return c.Int(value, "ull")


def _words(width: int) -> int:
    """64-bit words of a field: a metadata, result or record slot of over 64 bits takes two."""
    return (width + 63) // 64


def _ctype(width: int) -> str:
    return "nfc_u128" if width > 64 else "uint64_t"


@dataclass
class _Ctx:
    prog: ir.Program
    placement: Placement
    bridges: tuple[Bridge, ...]
    memory: Mapping[str, float]  # the server profile's [memory]: the key unit, the values kept inline
    shares: Mapping[str, int]  # a table the servers split evenly -> over how many (others: all on each)
    inst: dict[str, int] = field(default_factory=dict)
    meta: dict[str, int] = field(default_factory=dict)  # name -> its first slot in p->meta
    nmeta: int = 0  # slots of p->meta used (a field over 64 bits takes two)
    res: dict[tuple[str, str], int] = field(default_factory=dict)
    nres: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    punts: dict[str, int] = field(default_factory=dict)  # punt reason -> its code (PUNT_BASE and up)
    tindex: dict[str, int] = field(default_factory=dict)  # server table -> its index in nfc_tables[]
    registers: dict[str, ir.Register] = field(default_factory=dict)  # those the server's code uses
    counters: dict[str, ir.Counter] = field(default_factory=dict)  # counters and meters the server's code uses
    uses_esp: int = 0  # the ESP suites the program uses: 1 AES-GCM, 2 AES-CBC + HMAC-SHA1 (nfc_esp.h)
    stage: str = ""  # the stage being lowered
    register_writes: bool = False  # a stage writes a register (nfc_main: one forwarding lcore)
    failure_drops: bool = False  # lowering ``if (!esp_decrypt(...)) { drop(...); }``: a failure drops
    software: bool = False
    in_parser: bool = False  # lowering a parse graph (std.packet_length is the frame's length)
    hoisted: list[c.Stmt] = field(default_factory=list)
    temps: int = 0
    push_bytes: int = 0  # the biggest header a stage pushes (its bytes live in p->store)
    moves: bool = False  # a stage pushes or pops a header
    written: set[Loc] = field(default_factory=set)  # what the cut's statements lowered so far write
    # the header instances valid on every path to the statement being lowered: their fields are
    # read and written without testing p->valid (compiler/passes/validity.py, as the P4 lowering)
    must: frozenset[str] = frozenset()
    # the header instances possibly valid there (None: any): the others are invalid, their fields
    # read as 0 and their validity tests fold (may_step from the cut's entry)
    may: frozenset[str] | None = None
    # each cut's end: the instances possibly valid, those valid on every path, and whether a
    # stage of it pushes or pops a header (nfc_output's functions fold them per cut)
    cut_end: dict[int, tuple[frozenset[str], frozenset[str], bool]] = field(default_factory=dict)
    # a burst runs stage by stage (_stage_major): each stage's lookups prefetched in bulk at its
    # entry, with the headers valid there on every path and possibly, per (cut, stage index)
    stage_major: bool = False
    stage_entry: dict[tuple[int, int], tuple[frozenset[str], frozenset[str] | None]] = field(default_factory=dict)
    # each stage's _stage_tables, derived on first use: the key functions ask per table and stage
    stage_tables: dict[str, list[str]] = field(default_factory=dict)
    # lowering the hit arm of a switch-cached state's lookup: the table and its record's name,
    # for the links its refreshes note (nfc_state.h)
    hit_of: tuple[ir.Table, str] | None = None
    links: dict[str, list[str]] = field(default_factory=dict)  # _links, once per table

    def meta_slot(self, name: str, width: int) -> int:
        if name not in self.meta:
            if self.nmeta + _words(width) > 64:
                raise Unsupported("more than 64 words of metadata fields and locals", Span(self.prog.file, 1, 1, 1, 1))
            self.meta[name] = self.nmeta
            self.nmeta += _words(width)
        return self.meta[name]


def _check_instances(prog: ir.Program) -> None:
    """The packet's header slots (nfc_rt.h): at most MAX_INST instances of at most MAX_HDR bytes
    each; a bigger header would be copied past its slot."""
    if len(prog.instances) > MAX_INST:
        raise Unsupported(f"more than {MAX_INST} header instances in a packet", prog.instances[MAX_INST].span)
    for i in prog.instances:
        h = prog.headers[i.header]
        if h.bits > 8 * MAX_HDR:
            raise Unsupported(f"a header over {MAX_HDR} bytes ('{h.name}' is {(h.bits + 7) // 8})", h.span)


SOFTWARE_CUT = 100  # p->cut of a raw packet in software-only mode: SOFTWARE_CUT + pipeline index


@dataclass(frozen=True)
class Server:
    """The generated server program: ``nf.c`` and ``nfc_prog.h``, the sizes of its packet model."""

    nf: c.Unit
    sizes: c.Unit


def lower_server(prog: ir.Program, placement: Placement, bridges: tuple[Bridge, ...], memory: Mapping[str, float],
                 shares: Mapping[str, int], software: bool = False, stage_major: bool = False) -> Server:
    """``memory``: the server profile's ``[memory]`` (the tables' key unit and the values kept
    in the data word, which the compiler's memory model reads too).
    ``shares``: the tables whose entries the servers split evenly, and over how many
    (compiler/server_load.py ``spread``): each is sized for its share of the entries.
    ``software``: no switch; packets arrive raw on logical ports and run whole pipelines.
    ``stage_major``: the target runs an order-free program's bursts stage by stage (its profile's
    ``stage_major`` op); without it every program runs packet by packet."""
    x = _Ctx(prog, placement, bridges, memory, shares, software=software)
    _check_instances(prog)
    x.inst = {i.name: k for k, i in enumerate(prog.instances)}
    for reason, span in reason_uses(prog):
        if reason in RUNTIME_DROPS:
            raise NameClash(f"reason '{reason}' is what the server counts its own drops under "
                            f"({', '.join(RUNTIME_DROPS)}): the two counts would be one; rename it", span)
    x.reasons = {r: i + 1 for i, r in enumerate(drop_reasons(prog))}
    x.punts = {r: PUNT_BASE + i for i, r in enumerate(punt_reasons(prog))}
    if len(x.reasons) >= PUNT_BASE or len(x.punts) > 256 - PUNT_BASE:  # one byte of codes, drops below punts
        raise Unsupported(f"more than {PUNT_BASE - 1} drop reasons or {256 - PUNT_BASE} punt reasons on the server",
                          Span(prog.file, 1, 1, 1, 1))
    for f in prog.metadata:
        x.meta_slot(f.name, f.width)
    tables = [prog.tables[t] for t in _server_tables(x)]
    if len(tables) > MAX_TABLES:
        raise Unsupported(f"more than {MAX_TABLES} tables on the server", tables[MAX_TABLES].span)
    for t in tables:
        _check_table(x, t)
    x.tindex = {t.name: i for i, t in enumerate(tables)}
    for b in bridges:  # every metadata slot exists before nfc_from_switch sizes its memset
        for bf in b.fields:
            if bf.name.startswith("meta."):
                x.meta_slot(bf.name[5:], bf.width)
    used = {pl.parser for pl in prog.pipelines}  # a parser no pipeline uses (W001) would be an unused function
    parsers = [_parser(x, g) for g in prog.parsers.values() if g.name in used] if software else []
    x.stage_major = stage_major and _stage_major(x)
    funcs = [*parsers, *_run(x), _to_switch(x), _bridge_fn(x), _in_place(x), _finish_in_place(x), _reason_fn(x),
             _bench_key(x, tables), _stage_key(x, tables)]
    funcs.append(_from_switch(x))  # last: it clears exactly the slots the others use
    funcs = [void_unused_params(f) for f in funcs]  # with no server stage or table some are not read
    items: list[c.Include | c.Global | c.Func] = [
        c.Include("<stdio.h>"), c.Include("<stdlib.h>"), c.Include("<string.h>"), c.Include("<rte_hash.h>"),
        c.Include("<rte_jhash.h>"), c.Include("<rte_lcore.h>"), c.Include('"nfc_rt.h"'), c.Include('"nfc_esp.h"'),
        c.Global("const int", "nfc_nreasons", str(len(x.reasons))),
        c.Global("const int", "nfc_software", "1" if software else "0",
                 "1: no switch, raw packets on logical ports; 0: behind the switch's bridge headers"),
    ]
    items += [c.Global("const int", "nfc_register_writes", "1" if x.register_writes else "0",
                       "1: a stage writes a register, which is not atomic across lcores: one forwarding lcore"),
              c.Global("const int", "nfc_uses_esp", str(x.uses_esp),
                       "the ESP suites used here: NFC_ESP_GCM, NFC_ESP_CBC (nfc_esp.h: their crypto devices "
                       "are set up)"),
              c.Global("const int", "nfc_fixed_layout",
                       "1" if software and not x.moves and not x.uses_esp and
                       all(_in_packet_order(x, prog.parsers[name]) for name in used) else "0",
                       "1: a packet leaves with the headers it arrived with, where they arrived, and its payload "
                       "(no switch bridge, no header pushed or popped, no ESP): nfc_output writes the checksums"),
              c.Global("const int", "nfc_phases", str(_phases(x) if x.stage_major else 0),
                       "the stages a burst runs one after the other, each over every packet, its lookups "
                       "prefetched in bulk at its entry (0: every packet runs all of its stages in turn, nfc_run)"),
              c.Global("const uint64_t", f"nfc_phase_tables[{_phases(x)}]",
                       "{" + ", ".join(f"0x{m:x}ull" for m in _phase_tables(x)) + "}",
                       "the tables looked up in each of those stages (bit i: nfc_tables[i])"),
              c.Global("const int", "nfc_crypto_drop", str(x.reasons.get(CRYPTO_REASON, 0)),
                       "the drop code of crypto_unavailable (a burst's batched encryption that failed)"),
              c.Global("const int", "nfc_ninst", str(len(prog.instances))),
              c.Global("const uint16_t", f"nfc_inst_bytes[{max(1, len(prog.instances))}]",
                       "{" + ", ".join(str(prog.headers[i.header].bits // 8) for i in prog.instances) + "}"
                       if prog.instances else "{0}", "the bytes of each header instance, in packet order"),
              c.Global("const char", "nfc_program[]", string_literal(Path(prog.file).stem),
                       "the NF, as the control channel names it"),
              c.Global("const int", "nfc_ntables", str(len(tables))),
              c.Global("struct nfc_table", f"nfc_tables[{max(1, len(tables))}]",
                       tuple(_table_desc(x, t) for t in tables) or "{{0}}",
                       "the server's tables (nfc_tables.c creates them and applies entries)")]
    items += [*_object_globals(x), *funcs]
    nf = c.Unit(f"Generated by nfc from {prog.file}: the server part. Do not edit: edit the .nfp source.",
                tuple(items))
    return Server(nf, _sizes(x))


def _sizes(x: _Ctx) -> c.Unit:
    """nfc_prog.h: struct nfc_pkt's slots as this program uses them (nfc_rt.h includes it), so
    that a burst of packets is a few KiB, not 32 times the generator's limits."""
    kept = _kept_key_bytes(x)
    return c.Unit(f"Generated by nfc from {x.prog.file}: the server's packet model sized for it, and its "
                  "tables' layout as the server profile's [memory] describes it (nfc_rt.h).", (
        c.Define("NFC_MAX_INST", str(max(1, len(x.prog.instances))), "header instances"),
        c.Define("NFC_MAX_HDR", str(max(1, x.push_bytes)), "bytes of the biggest pushed header"),
        c.Define("NFC_MAX_META", str(max(1, x.nmeta)), "words of metadata fields and locals"),
        c.Define("NFC_MAX_RES", str(max(1, x.nres)), "words of lookup result fields"),
        c.Define("NFC_PRE_TABLES", str(max(1, len(kept))), "tables whose bulk lookup answers are kept per packet"),
        c.Define("NFC_PRE_KEY", str(-(-max([8, *kept]) // 8) * 8), "key bytes of a kept answer (a multiple of 8: "
                 "each key 8-byte aligned, as rte_hash's CRC reads it)"),
        *runtime_layout(x.memory),
    ))


def runtime_layout(m: Mapping[str, float]) -> tuple[c.Define, ...]:
    """The tables' layout the runtime takes from the server profile's [memory] ``m`` (nfc_rt.h):
    the figures the compiler's memory model reads too."""
    return (
        c.Define("NFC_TABLE_CAP", f"{int(m['state_max'])}u", "a data-plane state table's most entries (state_max)",
                 overridable=True),
        c.Define("NFC_STATE_ROOM_DIV", f"{int(m['state_room_div'])}u", "and room for 1/this more removed keys"),
        c.Define("NFC_STATE_ROOM_ADD", f"{int(m['state_room_add'])}u", "and this many more"),
        c.Define("NFC_GROW_FROM", f"{int(m['grow_from'])}u", "a control-plane table's first room, at most"),
        c.Define("NFC_GROW_BY", f"{int(m['grow_by'])}u", "and its growth step"),
        c.Define("NFC_GROW_PAST_DIV", f"{int(m['grow_past_div'])}u", "past its size: 1/this of its capacity more"),
        c.Define("NFC_INLINE_BITS", str(int(m["inline_value_bits"])), "values kept in the data word, at most"),
        c.Define("NFC_INLINE_LPM_BITS", str(int(m["inline_lpm_value_bits"])), "in an LPM trie's word"),
        c.Define("NFC_INLINE_LPM6_BITS", str(int(m["inline_lpm6_value_bits"])), "in a trie of a field over 64 bits"),
    )


def _kept(x: _Ctx, t: ir.Table) -> bool:
    """Whether nfc_prefetch keeps the bulk lookup's answers of server table ``t`` per packet (its
    rule in nfc_rt.h, with the generator's bounds PRE_TABLES and PRE_KEY)."""
    return x.tindex[t.name] < PRE_TABLES and not t.is_state and _lookup_bytes(x, t) <= PRE_KEY


def _kept_key_bytes(x: _Ctx) -> list[int]:
    """The key bytes of the server tables up to the last one whose bulk lookup answers
    nfc_prefetch keeps (0 for one it does not): NFC_PRE_TABLES and NFC_PRE_KEY sized for this
    program within the generator's PRE_TABLES and PRE_KEY, so that the same tables are kept."""
    sizes = [0] * len(x.tindex)
    for t in x.prog.tables.values():
        if t.name in x.tindex and _kept(x, t):
            sizes[x.tindex[t.name]] = _lookup_bytes(x, t)  # what nfc_prefetch builds in pre_key
    while sizes and sizes[-1] == 0:
        sizes.pop()
    return sizes


def _server_tables(x: _Ctx) -> list[str]:
    """The tables of the stages the server runs (its own, and switch caches' miss paths), each
    once, in the order of first use."""
    missed = {m.stage for m in x.placement.misses}
    names: dict[str, None] = {}  # a dict, not a list: membership in O(1) (was O(tables²))
    for st in x.prog.stages.values():
        if x.software or x.placement.segment.get(st.name) is Segment.SERVER or st.name in missed:
            names.update(dict.fromkeys(_tables_of(x, st.name)))
    return list(names)


def _tables_of(x: _Ctx, stage: str) -> list[str]:
    """``_stage_tables`` of ``stage``, derived once per lowering: the key functions ask it per
    table and stage, which split every stage into units again for every table (O(stages²))."""
    tables = x.stage_tables.get(stage)
    if tables is None:
        tables = x.stage_tables[stage] = _stage_tables(x.prog, x.prog.stages[stage])
    return tables


def _stage_tables(prog: ir.Program, st: ir.Stage) -> list[str]:
    """The tables a stage looks up, then the state it writes without looking it up (an insert
    into a seen-set no stage reads still needs its table)."""
    looked_up = [t for u in stage_units(prog, st) for t in u.tables]
    written = [s.state for s in walk_stmts(st.body) if isinstance(s, ir.Insert | ir.Remove | ir.Refresh)]
    return list(dict.fromkeys(looked_up + written))  # each once: HELLO names a table by its index


def _check_table(x: _Ctx, t: ir.Table) -> None:
    if t.is_state and t.match != "exact":
        raise Unsupported("non-exact data-plane state", t.span)
    if any(k.expr.width > MAX_WIDTH for k in t.keys) or any(v.width > MAX_WIDTH for v in t.values):
        raise Unsupported(f"fields wider than {MAX_WIDTH} bits", t.span)
    if len(t.keys) > MAX_FIELDS or len(t.values) > MAX_FIELDS or _key_bytes(x, t) > MAX_KEY:
        rules = f" (a ternary or range table's rules: {ACL_CHUNKS} chunks of 32 bits)" if acl_table(t) else ""
        raise Unsupported(f"more than {MAX_FIELDS} key or value fields, or keys over {MAX_KEY} bytes{rules}", t.span)
    wide = next((k for k in t.keys if k.match == "range" and k.expr.width > 32), None)
    if wide is not None:
        raise Unsupported(f"range fields over 32 bits on the server ({wide.name} is bit<{wide.expr.width}>)", t.span)


def _tracked(x: _Ctx, t: ir.Table) -> bool:
    """The server samples the hits of a table the switch caches (nfc_hits.h): its lookups here
    are the switch's misses, the candidates for promotion.  Keys over NFC_HITS_KEY bytes are not."""
    return (not x.software and not acl_table(t) and _key_bytes(x, t) <= HITS_KEY
            and any(m.table == t.name for m in x.placement.misses))


def _links(x: _Ctx, t: ir.Table) -> list[str]:
    """The state tables the ``refresh`` statements of ``t``'s hit arms refresh, when ``t`` is a
    state the switch caches: a hit there refreshes nothing on the server, so the server records
    which entries its own hits refreshed, and the cache manager replays them (nfc_state.h)."""
    if t.name in x.links:
        return x.links[t.name]
    links: list[str] = []
    x.links[t.name] = links
    if not (t.is_state and _tracked(x, t)):
        return links
    for st in x.prog.stages.values():
        for s in walk_stmts(st.body):
            if isinstance(s, ir.Lookup) and s.table == t.name:
                links += [r.state for r in walk_stmts(s.hit) if isinstance(r, ir.Refresh) and r.state not in links]
    if len(links) > MAX_LINKS:
        raise Unsupported(f"a switch-cached state whose hit refreshes more than {MAX_LINKS} state tables", t.span)
    return links


def _table_desc(x: _Ctx, t: ir.Table) -> c.Init:
    """A table's entry in nfc_tables[]: what nfc_tables.c needs to create it and check entries."""
    lpm = [i for i, k in enumerate(t.keys) if k.match == "lpm"] if _lpm_key(t) else []  # an ACL's LPM field: a mask
    # what this server holds (a uint32_t): the runtime sizes the table for it
    size = min(entries_share(t.size, x.shares.get(t.name, 1)), 0xFFFFFFFF)
    tracked, links = _tracked(x, t), _links(x, t)
    return c.Init((
        ("name", f'"{t.name}"'), ("src", f'"{_src(t.span)}"'), ("size", f"{size}u"),
        ("nkeys", str(len(t.keys))), ("nvalues", str(len(t.values))), ("lpm", str(lpm[0] if lpm else -1)),
        ("acl", "1" if acl_table(t) else "0"), ("match", "{" + ", ".join(_MATCH[k.match] for k in t.keys) + "}"),
        ("state", "1" if t.is_state else "0"), ("inline_values", "1" if values_inline(t, x.memory) else "0"),
        ("tracked", "1" if tracked else "0"), ("key_bytes", str(_key_bytes(x, t))),
        ("key_width", "{" + ", ".join(str(k.expr.width) for k in t.keys) + "}"),
        ("value_width", "{" + ", ".join(str(v.width) for v in t.values) + "}" if t.values else "{0}"),
        ("timeout_ns", f"{timeout_ns_of(t)}ull"), ("refresh", "1" if t.is_state and t.hints.refresh else "0"),
        ("nlinks", str(len(links))), ("link_table", "{" + ", ".join(str(x.tindex[y]) for y in links) + "}"
                                       if links else "{0}"),
        *((("lpm_stride1", str(_lpm_stride1(t))),) if lpm else ()),
        *((("holds_ports", "1"), ("held_key", "{" + ", ".join(map(str, t.holds_ports)) + "}"))
          if t.holds_ports is not None else ()),
    ), f"table {t.name}, {_src(t.span)}")


def _table(x: _Ctx, t: ir.Table) -> c.Expr:
    return c.Name(f"&nfc_tables[{x.tindex[t.name]}]")


def _lookup_bytes(x: _Ctx, t: ir.Table) -> int:
    """The key a lookup builds: an ACL table's is rte_acl's input (nfc_acl.h), a zero byte, three
    of padding, then each field right-aligned in 32-bit chunks; else the table's key."""
    return 4 + 4 * acl_chunks(t) if acl_table(t) else _key_bytes(x, t)


def _lpm_key(t: ir.Table) -> tuple[int, int] | None:
    """(bit offset, width) of the LPM field in the key, if the table has one (an ACL table's LPM
    field is a mask of its rules, not a trie: None)."""
    if acl_table(t):
        return None
    off = 0
    for k in t.keys:
        if k.match == "lpm":
            return off, k.expr.width
        off += k.expr.width
    return None


# a VRF expected to hold fewer routes than this gets 2^8 entries at its trie's level 1 (nfc_lpm.h)
SMALL_VRF_ROUTES = 1 << 16


def _lpm_stride1(t: ir.Table) -> int:
    """The bits of an LPM table's trie level 1 (nfc_lpm.h): 16, DIR-24-8's first stage cut in two,
    unless the table's exact fields name VRFs and its size spread over all of them is under
    SMALL_VRF_ROUTES each: then 8, so that a VRF's /8 holding a longer route costs a table of
    2 KiB, not 512 KiB (the DSR router's 10M routes over 2^14 VRFs: 610 each), for one more
    load on the way to a /17-/24 route."""
    lpm = _lpm_key(t)
    if lpm is None:
        return 16
    vrf_bits = sum(k.expr.width for k in t.keys) - lpm[1]
    return 8 if vrf_bits and t.size >> min(vrf_bits, 63) < SMALL_VRF_ROUTES else 16


def _key_bytes(x: _Ctx, t: ir.Table) -> int:
    """The bytes of the table's rte_hash key."""
    return server_key_bytes(t, int(x.memory["key_unit"]))


# ---- bridge in / out ---------------------------------------------------------------------------

def _p(field_: str) -> c.Expr:
    return c.Name(f"p->{field_}")


def _from_switch(x: _Ctx) -> c.Func:
    body: list[c.Stmt] = [
        c.ExprStmt(c.Call("memset", (c.Name("p->valid"), c.Int(0, ""), c.Call("sizeof", (c.Name("p->valid"),))))),
        c.Comment(f"only the {x.nmeta} metadata slots this program uses"),
        # from the first slot's address: given the array itself, a byte count equal to its number of
        # elements (8 slots are 64 bytes; 64 slots were once the array's length) draws -Wmemset-elt-size
        c.ExprStmt(c.Call("memset", (c.Name("&p->meta[0]"), c.Int(0, ""),
                                     c.Bin("*", c.Int(max(1, x.nmeta), ""),
                                           c.Call("sizeof", (c.Name("p->meta[0]"),)))))),
        c.Assign(_p("egress_set"), c.Int(0, "")),
        c.Assign(_p("ingress_port"), c.Name("port")),
        c.Assign(_p("pre_ok"), c.Int(0, "")),
    ]
    if x.software:
        for i, pl in enumerate(x.prog.pipelines):
            if pl.when is not None:
                raise Unsupported("pipelines selected by 'when' on the server", pl.span)
            cond: c.Expr = c.Int(0, "")
            for lo, hi in pl.ports:
                upper = c.Bin("<=", c.Name("port"), c.Int(hi, "u"))
                rng = upper if lo == 0 else c.Bin("&&", c.Bin(">=", c.Name("port"), c.Int(lo, "u")), upper)
                cond = rng if cond == c.Int(0, "") else c.Bin("||", cond, rng)
            body.append(c.If(cond, (c.Assign(_p("cut"), c.Int(SOFTWARE_CUT + i, "u")),
                                    c.Return(c.Call(f"nfc_parse_{pl.parser}", (c.Name("p"), c.Name("data"),
                                                                               c.Name("len")))))))
        body.append(c.Return(c.Int(x.reasons["no_pipeline"], "")))
        return c.Func("int", "nfc_from_switch", ("struct nfc_pkt *p", "const uint8_t *data", "uint32_t len",
                                                 "uint32_t port"), tuple(body),
                      "select the pipeline by ingress port and parse the packet", static=False)
    body += [
        c.If(c.Bin("<", c.Name("len"), c.Int(1, "u")), (c.Return(c.Int(x.reasons["bad_bridge"], "")),)),
        c.Assign(_p("cut"), c.Index(c.Name("data"), c.Int(0, ""))),
    ]
    for b in x.bridges:
        if b.direction is not Direction.TO_SERVER:
            continue
        body.append(c.If(c.Bin("==", _p("cut"), c.Int(b.cut_id, "u")), tuple(_decode(x, b))))
    body.append(c.Return(c.Int(x.reasons["bad_bridge"], "")))
    return c.Func("int", "nfc_from_switch", ("struct nfc_pkt *p", "const uint8_t *data", "uint32_t len",
                                             "uint32_t port"),
                  tuple(body), "check the bridge header, restore its fields, copy the headers it says are valid",
                  static=False)


def _decode(x: _Ctx, b: Bridge) -> list[c.Stmt]:
    out: list[c.Stmt] = [c.Comment(f"bridge #{b.cut_id}: pipeline {b.pipeline}, {b.path}"),
                         c.If(c.Bin("<", c.Name("len"), c.Int(b.bytes, "u")),
                              (c.Return(c.Int(x.reasons["bad_bridge"], "")),)),
                         c.Decl("uint32_t", "off", c.Int(b.bytes, "u"))]
    required = [i for i, inst in enumerate(b.valid_bits) if inst in b.required]
    if required:  # valid on every path to the cut: a clear bit is a bad bridge (their bits tested at once)
        width = required[-1] + 1
        mask = sum(1 << (width - 1 - i) for i in required)
        bits = _get(c.Name("data"), 8, width)
        clear = c.Un("!", bits) if width == 1 else c.Bin("!=", c.Bin("&", bits, c.Int(mask, "u")), c.Int(mask, "u"))
        out.append(c.If(clear, (c.Return(c.Int(x.reasons["bad_bridge"], "")),)))
    for f in b.fields:
        out += _store_field(x, f.name, f.width, _get(c.Name("data"), f.offset, f.width))
    # the required headers before the first that may be absent are at fixed offsets: one length
    # check for them all (a packet too short for any of them is dropped as truncated either way)
    lead = list(itertools.takewhile(lambda inst: inst in b.required, b.valid_bits))
    if lead:
        total = sum(x.prog.header_of(inst).bits // 8 for inst in lead)
        out.append(c.If(c.Bin(">", c.Bin("+", c.Name("off"), c.Int(total, "u")), c.Name("len")),
                        (c.Return(c.Int(x.reasons["truncated"], "")),)))
    for i, inst in enumerate(b.valid_bits):
        k = x.inst[inst]
        size = x.prog.header_of(inst).bits // 8
        fits = () if i < len(lead) else (c.If(c.Bin(">", c.Bin("+", c.Name("off"), c.Int(size, "u")), c.Name("len")),
                                               (c.Return(c.Int(x.reasons["truncated"], "")),)),)
        copy = (*fits,
                _point(k),
                c.Assign(c.Name(f"p->valid[{k}]"), c.Int(1, "")),
                c.Assign(c.Name("off"), c.Bin("+", c.Name("off"), c.Int(size, "u"))))
        # a required header's bit was tested above
        out += copy if inst in b.required else [c.If(_get(c.Name("data"), 8 + i, 1), copy)]
    out += [c.Assign(_p("payload"), c.Bin("+", c.Name("data"), c.Name("off"))),
            c.Assign(_p("payload_len"), c.Bin("-", c.Name("len"), c.Name("off"))),
            c.Return(c.Name("NFC_CONTINUE"))]
    return out


def _point(k: int) -> c.Stmt:
    """Header instance k is the bytes at data + off, where the packet has them (not a copy: an
    unchanged header goes out without being copied back, nfc_output)."""
    return c.Assign(c.Name(f"p->hdr[{k}]"), c.Cast("uint8_t *", c.Cast("uintptr_t", c.Bin("+", c.Name("data"),
                                                                                          c.Name("off")))))


def _field_slot(x: _Ctx, name: str, width: int) -> tuple[str, int] | c.Expr:
    """Where a bridged field lives: (array, first slot) of a metadata field, or the variable."""
    if name == EGRESS:
        return _p("egress")
    if name == EGRESS_SET:
        return _p("egress_set")
    kind, _, fname = name.partition(".")
    if kind == "meta":
        return "meta", x.meta_slot(fname, width)
    if fname == "ingress_port":
        return _p("ingress_port")
    raise Unsupported(f"bridging std.{fname}", Span(x.prog.file, 1, 1, 1, 1))


def _load_field(x: _Ctx, name: str, width: int) -> c.Expr:
    at = _field_slot(x, name, width)
    return _slot_read(*at, width) if isinstance(at, tuple) else at


def _store_field(x: _Ctx, name: str, width: int, value: c.Expr) -> list[c.Stmt]:
    at = _field_slot(x, name, width)
    return _slot_write(x, *at, width, value) if isinstance(at, tuple) else [c.Assign(at, value)]


def _slot_read(array: str, slot: int, width: int) -> c.Expr:
    """A metadata or result field from its slot(s) of p->array (two, low word first, above 64 bits)."""
    if width <= 64:
        return c.Name(f"p->{array}[{slot}]")
    return c.Call("NFC_U128", (c.Name(f"p->{array}[{slot + 1}]"), c.Name(f"p->{array}[{slot}]")))


def _slot_write(x: _Ctx, array: str, slot: int, width: int, value: c.Expr) -> list[c.Stmt]:
    if width <= 64:
        return [c.Assign(c.Name(f"p->{array}[{slot}]"), value)]
    x.temps += 1
    v = c.Name(f"w{x.temps}")
    return [c.Decl("nfc_u128", v.name, value),
            c.Assign(c.Name(f"p->{array}[{slot}]"), c.Cast("uint64_t", v)),
            c.Assign(c.Name(f"p->{array}[{slot + 1}]"), c.Cast("uint64_t", c.Bin(">>", v, c.Int(64, "u"))))]


def _bridge_out(x: _Ctx) -> list[c.Stmt]:
    """``n`` := the server->switch bridge of the packet's cut (0: none), written right in front
    of ``end`` if its ``n`` bytes fit in ``room`` there, else not written (the caller compares)."""
    body: list[c.Stmt] = [c.Decl("uint32_t", "n", c.Int(0, "u"))]
    for b in x.bridges:
        if b.direction is not Direction.TO_SWITCH:
            continue
        came = find_bridge(x.bridges, b.pipeline, Direction.TO_SERVER, b.miss)
        assert came is not None, "every cut has its bridge both ways"
        fields: list[tuple[int, int, c.Expr]] = [(0, 8, c.Int(b.cut_id, "u"))]
        fields += [(8 + i, 1, _valid_at_end(x, came.cut_id, inst)) for i, inst in enumerate(b.valid_bits)]
        for f in b.fields:
            value = c.Cond(_p("egress_set"), _p("egress"), c.Int(0, "ull")) if f.name == EGRESS else \
                _load_field(x, f.name, f.width)
            fields.append((f.offset, f.width, value))
        size = c.Int(b.bytes, "u")
        enc: list[c.Stmt] = [c.Assign(c.Name("n"), size), c.If(c.Bin(">=", c.Name("room"), size), (
            c.Decl("uint8_t *", "out", c.Bin("-", c.Name("end"), size)), *_pack(x, "out", b.bytes, fields)))]
        body.append(c.If(c.Bin("==", _p("cut"), c.Int(came.cut_id, "u")), tuple(enc)))
    return body


def _checksum(h: ir.HeaderType, k: int, at: c.Expr) -> list[c.Stmt]:
    """The checksum field of header instance k (type h) written at ``at`` (a copy of the header,
    or the header itself), as the header's bytes at p->hdr[k] give it."""
    if h.checksum is None:
        return []
    off, size = _offset(h, h.checksum), h.bits // 8
    if off % 8 == 0:  # summed from the source: reading back a copy just stored stalls
        return [c.ExprStmt(c.Call("nfc_csum_put", (_at(at, off), c.Name(f"p->hdr[{k}]"), c.Int(size, "u"),
                                                   c.Int(off // 8, "u"))))]
    return [_set_expr(at, off, 16, c.Int(0, "u")), _set_expr(at, off, 16, c.Call("nfc_csum", (at, c.Int(size, "u"))))]


def _to_switch(x: _Ctx) -> c.Func:
    n = c.Name("n")
    body: list[c.Stmt] = [  # the bridge: its length asked (no room: not written), then written in front of out + n
        c.Decl("uint32_t", "n", c.Call("nfc_bridge_out", (c.Name("p"), c.Name("out"), c.Int(0, "u")))),
        c.If(c.Bin(">", n, c.Name("cap")), (c.Return(c.Int(0, "")),)),
        c.ExprStmt(c.Call("nfc_bridge_out", (c.Name("p"), c.Bin("+", c.Name("out"), n), n)))]
    for instance in x.prog.instances:
        h = x.prog.headers[instance.header]
        k = x.inst[instance.name]
        size = h.bits // 8
        at = c.Bin("+", c.Name("out"), c.Name("n"))
        emit: list[c.Stmt] = [c.If(c.Bin(">", c.Bin("+", c.Name("n"), c.Int(size, "u")), c.Name("cap")),
                                   (c.Return(c.Int(0, "")),)),
                              c.ExprStmt(c.Call("memcpy", (at, c.Name(f"p->hdr[{k}]"), c.Int(size, "")))),
                              *_checksum(h, k, at),
                              c.Assign(c.Name("n"), c.Bin("+", c.Name("n"), c.Int(size, "u")))]
        body.append(c.If(c.Name(f"p->valid[{k}]"), tuple(emit)))
    body += [c.If(c.Bin(">", c.Bin("+", c.Name("n"), _p("payload_len")), c.Name("cap")), (c.Return(c.Int(0, "")),)),
             c.ExprStmt(c.Call("memcpy", (c.Bin("+", c.Name("out"), c.Name("n")), _p("payload"),
                                          _p("payload_len")))),
             c.Return(c.Bin("+", c.Name("n"), _p("payload_len")))]
    return c.Func("uint32_t", "nfc_to_switch", ("const struct nfc_pkt *p", "uint8_t *out", "uint32_t cap"),
                  tuple(body), "the server->switch bridge, the valid headers in packet order, the payload; 0: no room",
                  static=False)


def _bridge_fn(x: _Ctx) -> c.Func:
    return c.Func("uint32_t", "nfc_bridge_out", ("const struct nfc_pkt *p", "uint8_t *end", "uint32_t room"),
                  (*_bridge_out(x), c.Return(c.Name("n"))),
                  "the server->switch bridge alone, written in front of end if it fits in room there (nfc_output, "
                  "headers in place); its bytes, 0: none", static=False)


def _valid_at_end(x: _Ctx, cut: int, inst: str) -> c.Expr:
    """Whether header instance ``inst`` is valid after the stages of ``cut``: a constant where
    it is valid on every path there, or on none."""
    may, must, _ = x.cut_end[cut]
    if inst in must or inst not in may:
        return c.Int(int(inst in must), "")
    return c.Name(f"p->valid[{x.inst[inst]}]")


def _per_cut(x: _Ctx, each: Callable[[int], list[c.Stmt]], generic: list[c.Stmt],
             end: tuple[c.Stmt, ...] = ()) -> list[c.Stmt]:
    """``each(cut)`` and ``end`` under ``if (p->cut == cut)`` for every cut whose statements are
    not ``generic``, then ``generic`` (what the others, and a packet of no cut, get); only
    ``each`` when every cut's is the same statements."""
    bodies = {cut: each(cut) for cut in x.cut_end}
    if len({repr(b) for b in bodies.values()}) == 1:
        return next(iter(bodies.values()))
    return [*(c.If(c.Bin("==", _p("cut"), c.Int(cut, "u")), (*body, *end)) for cut, body in bodies.items()
              if body != generic), *generic]


def _in_place(x: _Ctx) -> c.Func:
    """Where the valid headers start if they are still where they arrived, one after the other
    in packet order up to the payload (none pushed, none moved); NULL otherwise.  A cut behind
    the switch whose stages push and pop nothing has them there: nfc_from_switch laid them out
    in packet order after the bridge, so the start is the payload less their bytes."""
    def known(cut: int) -> list[c.Stmt]:
        b = next((b for b in x.bridges if b.direction is Direction.TO_SERVER and b.cut_id == cut), None)
        if b is None or x.cut_end[cut][2] or x.uses_esp or [x.inst[i] for i in b.valid_bits] != \
                sorted(x.inst[i] for i in b.valid_bits):
            return generic
        at: c.Expr = _p("payload")
        fixed = sum(x.prog.header_of(i).bits // 8 for i in b.valid_bits if i in x.cut_end[cut][1])
        if fixed:
            at = c.Bin("-", at, c.Int(fixed, "u"))
        for inst in b.valid_bits:
            valid = _valid_at_end(x, cut, inst)
            if not isinstance(valid, c.Int):
                at = c.Bin("-", at, c.Cond(valid, c.Int(x.prog.header_of(inst).bits // 8, "u"), c.Int(0, "u")))
        return [c.Return(at)]

    generic: list[c.Stmt] = [c.Decl("const uint8_t *", "at", _p("payload"))]
    for instance in reversed(x.prog.instances):
        k, size = x.inst[instance.name], x.prog.headers[instance.header].bits // 8
        generic.append(c.If(c.Name(f"p->valid[{k}]"), (
            c.Assign(c.Name("at"), c.Bin("-", c.Name("at"), c.Int(size, "u"))),
            c.If(c.Bin("!=", c.Name(f"p->hdr[{k}]"), c.Name("at")), (c.Return(c.Name("NULL")),)))))
    generic.append(c.Return(c.Name("at")))
    body = _per_cut(x, known, generic)
    return c.Func("const uint8_t *", "nfc_headers_in_place", ("const struct nfc_pkt *p",), tuple(body),
                  "where the valid headers start, if in place in front of the payload; NULL: moved", static=False)


def _finish_in_place(x: _Ctx) -> c.Func:
    """The checksums of the valid headers, per cut of those that can be valid after its stages."""
    def sums(cut: int | None) -> list[c.Stmt]:
        out: list[c.Stmt] = []
        for instance in x.prog.instances:
            h, k = x.prog.headers[instance.header], x.inst[instance.name]
            valid = c.Name(f"p->valid[{k}]") if cut is None else _valid_at_end(x, cut, instance.name)
            if h.checksum is None or valid == c.Int(0, ""):
                continue
            put = _checksum(h, k, c.Name(f"p->hdr[{k}]"))
            out += put if valid == c.Int(1, "") else [c.If(valid, tuple(put))]
        return out

    generic = sums(None)
    body = _per_cut(x, sums, generic, (c.Return(None),))
    return c.Func("void", "nfc_finish_in_place", ("struct nfc_pkt *p",), tuple(body) or (c.Return(None),),
                  "the checksum fields of the valid headers, written where the headers are", static=False)


def _pack(x: _Ctx, buf: str, size: int, fields: list[tuple[int, int, c.Expr]]) -> list[c.Stmt]:
    """Bytes [0, size) of ``buf`` := the fields (bit offset, width, value), most significant bit
    first, zero between them: what a memset and one nfc_set per field write, as one store per
    8 bytes (read-modify-writes of bytes just stored stall store forwarding).  Each value is
    evaluated once, in order, before anything is stored."""
    spans = sorted((off, off + w) for off, w, _ in fields)
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)) or (spans and spans[-1][1] > 8 * size):
        raise GeneratorError(f"internal error: overlapping fields packed into {buf}, please report",
                             Span(x.prog.file, 1, 1, 1, 1))
    out: list[c.Stmt] = []
    values: list[tuple[int, int, c.Expr]] = []
    for off, w, e in fields:
        x.temps += 1
        out.append(c.Decl(_ctype(w), f"f{x.temps}", e))
        values.append((off, w, c.Name(f"f{x.temps}")))
    for start in range(0, 8 * size, 64):
        end = min(start + 64, 8 * size)
        word: c.Expr | None = None
        for off, w, v in values:
            lo, hi = max(off, start), min(off + w, end)
            if lo >= hi:
                continue
            part = c.Bin(">>", v, c.Int(off + w - hi, "u")) if off + w > hi else v
            part = c.Bin("&", part, _mask(hi - lo))
            part = c.Bin("<<", part, c.Int(end - hi, "u")) if end > hi else part
            word = part if word is None else c.Bin("|", word, part)
        out.append(_set_expr(c.Name(buf), start, end - start, word if word is not None else c.Int(0, "ull")))
    return out


def _set(buf: str, off: int, width: int, value: c.Expr) -> c.Stmt:
    return _set_expr(c.Name(buf), off, width, value)


def _set_expr(buf: c.Expr, off: int, width: int, value: c.Expr) -> c.Stmt:
    """Bits [off, off + width) of ``buf`` := value; a byte-aligned 8/16/32/64-bit field is one
    store, other whole bytes (a 48-bit MAC) a few: whole bytes are never read first (a buffer
    being filled may still be uninitialised; nfc_set's read-modify-write would read it)."""
    if _aligned(off, width):
        return c.ExprStmt(c.Call(f"nfc_set{width}", (_at(buf, off), value)))
    if width > 64:
        return c.ExprStmt(c.Call("nfc_setw", (buf, c.Int(off, "u"), c.Int(width, "u"), value)))
    if off % 8 == 0 and width % 8 == 0 and width < 64:
        return c.ExprStmt(c.Call("nfc_store_be", (_at(buf, off), c.Int(width // 8, "u"), value)))
    return c.ExprStmt(c.Call("nfc_set", (buf, c.Int(off, "u"), c.Int(width, "u"), value)))


def _get(buf: c.Expr, off: int, width: int) -> c.Expr:
    """Bits [off, off + width) of ``buf``; a byte-aligned 8/16/32/64-bit field is one load."""
    if _aligned(off, width):
        return c.Call(f"nfc_get{width}", (_at(buf, off),))
    return c.Call("nfc_getw" if width > 64 else "nfc_get", (buf, c.Int(off, "u"), c.Int(width, "u")))


def _aligned(off: int, width: int) -> bool:
    return off % 8 == 0 and width in (8, 16, 32, 64)


def _at(buf: c.Expr, off: int) -> c.Expr:
    """The address of byte ``off // 8`` of ``buf``."""
    return buf if off == 0 else c.Bin("+", buf, c.Int(off // 8, "u"))


def _offset(h: ir.HeaderType, name: str) -> int:
    off = 0
    for f in h.fields:
        if f.name == name:
            return off
        off += f.width
    raise KeyError(name)


# ---- parsers (software-only mode) ---------------------------------------------------------------

def _parser(x: _Ctx, g: ir.ParserGraph) -> c.Func:
    """The parse graph as labelled blocks; every extract checks the length first.  Only the
    states reachable from ``start`` get a label (an unreachable one, W002, would be unused)."""
    x.in_parser = True
    body: list[c.Stmt] = [c.Goto(f"st_{g.name}_start")]
    at_entry = parser_state_must(g)
    for st in reachable_states(g):
        body += [c.Comment(f"{g.name}.{st.name}, {_src(st.span)}"), c.Label(f"st_{g.name}_{st.name}")]
        x.must = at_entry[st.name]
        for s in st.stmts:
            if isinstance(s, ir.Extract):
                k, size = x.inst[s.inst], x.prog.header_of(s.inst).bits // 8
                body += [c.If(c.Bin(">", c.Bin("+", c.Name("off"), c.Int(size, "u")), c.Name("len")),
                              (c.Return(c.Int(x.reasons["truncated"], "")),)),
                         _point(k),
                         c.Assign(c.Name(f"p->valid[{k}]"), c.Int(1, "")),
                         c.Assign(c.Name("off"), c.Bin("+", c.Name("off"), c.Int(size, "u")))]
                x.must |= {s.inst}
            elif isinstance(s, ir.Verify):
                body.append(c.If(c.Un("!", _expr(x, s.cond)), (c.Return(c.Int(x.reasons[s.reason], "")),)))
            else:
                raise Unsupported("statements other than extract and verify in parser states", s.span)
        for case in st.cases:
            cond: c.Expr = c.Int(1, "")
            for e, (value, mask) in zip(st.select, case.values, strict=True):
                test = c.Bin("==", c.Bin("&", _expr(x, e), _const(mask)), _const(value))
                cond = test if cond == c.Int(1, "") else c.Bin("&&", cond, test)
            body.append(c.If(cond, tuple(_ptarget(x, g, case.target))))
        body += _ptarget(x, g, st.default)
    if "off" in names_used(tuple(body)):  # not when every path drops before extracting
        body.insert(0, c.Decl("uint32_t", "off", c.Int(0, "u")))
    x.in_parser, x.must = False, frozenset()
    return c.Func("int", f"nfc_parse_{g.name}", ("struct nfc_pkt *p", "const uint8_t *data", "uint32_t len"),
                  tuple(body), f"parser {g.name}, {_src(g.span)}")


def _in_packet_order(x: _Ctx, g: ir.ParserGraph) -> bool:
    """Whether every path of ``g`` extracts header instances in the packet's declared order, each
    at most once: then the valid headers lie in the frame as the reference deparses them (in
    declared order), from its first byte (nfc_fixed_layout).  A parser taking ``ipv4`` before
    ``eth`` when ``packet`` declares them the other way, or ``eth`` twice, moves them."""
    seen: set[tuple[str, int]] = set()

    def walk(state: str, last: int) -> bool:
        if (state, last) in seen:
            return True
        seen.add((state, last))
        st = g.state(state)
        for s in st.stmts:
            if isinstance(s, ir.Extract):
                if x.inst[s.inst] <= last:
                    return False
                last = x.inst[s.inst]
        return all(walk(t.name, last) for t in (*(case.target for case in st.cases), st.default)
                   if t.kind == "state")

    return walk("start", -1)


def _packet_length(x: _Ctx) -> c.Expr:
    """std.packet_length (16 bits): in a parser the frame's length, after it the packet as it is
    now, the valid headers and the payload (the reference interpreter's definition)."""
    if x.in_parser:
        return c.Bin("&", c.Cast("uint64_t", c.Name("len")), c.Int(0xFFFF, "ull"))
    known = sum(x.prog.header_of(i.name).bits // 8 for i in x.prog.instances if i.name in x.must)
    total: c.Expr = c.Cast("uint64_t", _p("payload_len"))
    if known:
        total = c.Bin("+", total, c.Int(known, "ull"))
    for i in x.prog.instances:
        if i.name in x.must or not _can_be_valid(x, i.name):
            continue
        size = x.prog.header_of(i.name).bits // 8
        total = c.Bin("+", total, c.Cond(c.Name(f"p->valid[{x.inst[i.name]}]"), c.Int(size, "ull"), c.Int(0, "ull")))
    return c.Bin("&", total, c.Int(0xFFFF, "ull"))


def _can_be_valid(x: _Ctx, inst: str) -> bool:
    """Whether header instance ``inst`` may be valid where the statement being lowered is."""
    return x.may is None or inst in x.may


def _ptarget(x: _Ctx, g: ir.ParserGraph, t: ir.PTarget) -> list[c.Stmt]:
    if t.kind == "accept":
        return [c.Assign(_p("payload"), c.Bin("+", c.Name("data"), c.Name("off"))),
                c.Assign(_p("payload_len"), c.Bin("-", c.Name("len"), c.Name("off"))),
                c.Return(c.Name("NFC_CONTINUE"))]
    if t.kind == "drop":
        return [c.Return(c.Int(x.reasons[t.name], ""))]
    if t.kind == "punt":
        return [c.Return(c.Int(_punt_code(x, t.name, t.span), ""))]
    return [c.Goto(f"st_{g.name}_{t.name}")]


# ---- stages ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Cut:
    """What the server runs for one value of p->cut: its stages (a whole pipeline on a server
    without a switch), and the header instances valid on entry to them on every path: those
    the bridge requires (nfc_from_switch drops a packet without them as bad_bridge), or those
    the pipeline's parser extracts on every path to accept."""

    id: int
    stages: tuple[str, ...]
    whole: bool
    must: frozenset[str]
    may: frozenset[str]  # possibly valid on entry: the bridge's validity bits, or what the parser may extract


def _cuts(x: _Ctx) -> list[_Cut]:
    out: list[_Cut] = []
    for b in x.bridges:
        if b.direction is Direction.TO_SERVER:
            pl = next(p for p in x.prog.pipelines if p.name == b.pipeline)
            out.append(_Cut(b.cut_id, tuple(x.placement.server_part(pl.stages, b)), False, frozenset(b.required),
                            frozenset(b.valid_bits)))
    if x.software:
        at_entry = must_be_valid(x.prog)
        out += [_Cut(SOFTWARE_CUT + i, tuple(pl.stages), True, at_entry[pl.stages[0]] if pl.stages else frozenset(),
                     parser_may_extract(x.prog.parsers[pl.parser]))
                for i, pl in enumerate(x.prog.pipelines)]
    return out


def _stage_major(x: _Ctx) -> bool:
    """Whether a burst may run stage by stage, every packet through a stage before any goes on
    to the next: when the stages of every cut are order-free (compiler/analysis.py).  The cost
    model (compiler/place_problem.py) asks it of the whole program: a program it prices stage
    by stage runs so here."""
    return order_free(x.prog, [s for cut in _cuts(x) for s in cut.stages])


def _phases(x: _Ctx) -> int:
    """nfc_run_phase's phases: the stages of the longest cut (one for a cut of none)."""
    return max([1, *(len(cut.stages) for cut in _cuts(x))])


def _phase_tables(x: _Ctx) -> list[int]:
    """Per phase, the server tables (bits of nfc_tables[]) some cut's stage of that phase looks up."""
    masks = [0] * _phases(x)
    for cut in _cuts(x):
        for j, name in enumerate(cut.stages):
            for t in _tables_of(x, name):
                if t in x.tindex:
                    masks[j] |= 1 << x.tindex[t]
    return masks


def _run(x: _Ctx) -> list[c.Func]:
    """nfc_run_phase (stage ``phase`` of the packet's cut) and nfc_run (all of them).  Stage
    major (x.stage_major), the stages' lookups take the answers prefetched at their stage's
    entry; otherwise nfc_run runs the stages in turn and nfc_run_phase is nfc_run."""
    body: list[c.Stmt] = []
    for cut in _cuts(x):
        code: list[list[c.Stmt]] = []
        x.written = set()  # nothing written yet: a key the stages have not changed is the one prefetched
        x.must, x.may, moves = cut.must, cut.may, x.moves
        x.moves = False
        for j, s in enumerate(cut.stages):
            st = x.prog.stages[s]
            x.stage = s
            if x.stage_major:  # prefetched at the stage's entry
                x.written = set()
            x.stage_entry[(cut.id, j)] = (x.must, x.may)
            code.append([c.Comment(f"stage {st.name}, {_src(st.span)}"), *_block(x, st.body)])
        x.cut_end[cut.id] = (x.may or frozenset(), x.must, x.moves)
        x.must, x.may, x.moves = frozenset(), None, moves or x.moves
        end = [c.If(c.Un("!", _p("egress_set")), (c.Return(c.Int(x.reasons["no_egress"], "")),))] if cut.whole else []
        done = c.Return(c.Name("NFC_CONTINUE"))
        if not x.stage_major:
            body.append(c.If(c.Bin("==", _p("cut"), c.Int(cut.id, "u")), (*itertools.chain(*code), *end, done)))
            continue
        code = code or [[]]  # a cut of no stage: its end at phase 0
        code[-1] += end
        body.append(c.If(c.Bin("==", _p("cut"), c.Int(cut.id, "u")), (
            *(c.If(c.Bin("==", c.Name("phase"), c.Int(j, "")), (*stage, done)) for j, stage in enumerate(code)),
            done)))
    body.append(c.Return(c.Int(x.reasons["bad_bridge"], "")))
    if not x.stage_major:
        return [c.Func("int", "nfc_run", ("struct nfc_pkt *p",), tuple(body),
                       "the server stages; NFC_CONTINUE or a drop reason code", static=False),
                c.Func("int", "nfc_run_phase", ("struct nfc_pkt *p", "int phase"),
                       (c.ExprStmt(c.Cast("void", c.Name("phase"))), c.Return(c.Call("nfc_run", (c.Name("p"),)))),
                       "not stage by stage (nfc_phases is 0): all of the packet's stages", static=False)]
    # answers kept before (nfc_prefetch as the packet arrived) are not those of the keys its
    # stages have: each lookup looks up its own
    code_ = c.Name("code")
    every: list[c.Stmt] = [c.Assign(_p("pre_ok"), c.Int(0, ""))]
    if _phases(x) > 1:
        every.append(c.Decl("int", "code", c.Name("NFC_CONTINUE")))
    for j in range(_phases(x) - 1):
        every += [c.Assign(code_, c.Call("nfc_run_phase", (c.Name("p"), c.Int(j, "")))),
                  c.If(c.Bin("!=", code_, c.Name("NFC_CONTINUE")), (c.Return(code_),))]
    every.append(c.Return(c.Call("nfc_run_phase", (c.Name("p"), c.Int(_phases(x) - 1, "")))))
    return [c.Func("int", "nfc_run_phase", ("struct nfc_pkt *p", "int phase"), tuple(body),
                   "stage `phase` of the packet's cut (none left: NFC_CONTINUE); NFC_CONTINUE or a drop reason code",
                   static=False),
            c.Func("int", "nfc_run", ("struct nfc_pkt *p",), tuple(every),
                   "the server stages, one after the other; NFC_CONTINUE or a drop reason code", static=False)]


def _block(x: _Ctx, stmts: tuple[ir.Stmt, ...]) -> list[c.Stmt]:
    """``stmts`` lowered from ``x.must`` (the headers valid on entry), which is left as the
    headers valid after them."""
    out: list[c.Stmt] = []
    for s in stmts:
        outer, x.hoisted, before, may = x.hoisted, [], x.must, x.may
        lowered = _stmt(x, s)  # nested blocks set x.must and x.may for their own statements
        out += [*x.hoisted, *lowered]
        x.hoisted = outer
        after = must_step(s, before, packet_order(x.prog))
        x.must = before if after is None else after  # None: no path goes on (what follows is unreachable)
        may_after = None if may is None else may_step(s, may)
        x.may = may if may_after is None else may_after
    return out


def _branches(x: _Ctx, s: ir.If | ir.Lookup,
              first_only: Callable[[], None] | None = None) -> tuple[list[c.Stmt], list[c.Stmt]]:
    """The two branches of ``s`` lowered, each from the headers valid on entry to it
    (``first_only``: called between the two, undoing what held for the first alone)."""
    (a, ma), (b, mb) = must_branches(s, x.must, packet_order(x.prog))
    before, may = x.must, x.may
    x.must = ma
    first = _block(x, a)
    if first_only is not None:
        first_only()
    x.must, x.may = mb, may
    second = _block(x, b)
    x.must, x.may = before, may
    return first, second


def _stmt(x: _Ctx, s: ir.Stmt) -> list[c.Stmt]:
    if not isinstance(s, ir.Lookup):  # (a lookup reads its key before it writes its results)
        x.written |= stmt_writes(x.prog, s)  # before an if's arms: they are lowered next
    match s:
        case ir.Assign():
            return [_assign(x, s.target, _expr(x, s.value))]
        case ir.If():
            x.failure_drops = _drops_when_false(s)
            cond = _expr(x, s.cond)
            x.failure_drops = False
            then, orelse = _branches(x, s)
            return [c.If(cond, tuple(then), tuple(orelse))]
        case ir.Lookup():
            return _lookup(x, s)
        case ir.Push():
            x.moves = True
            k = x.inst[s.inst]
            h = x.prog.header_of(s.inst)
            x.push_bytes = max(x.push_bytes, h.bits // 8)
            out: list[c.Stmt] = [c.Assign(c.Name(f"p->valid[{k}]"), c.Int(1, "")),
                                 c.Assign(c.Name(f"p->hdr[{k}]"), c.Name(f"p->store[{k}]")),
                                 c.ExprStmt(c.Call("memset", (c.Name(f"p->hdr[{k}]"), c.Int(0, ""),
                                                              c.Int(h.bits // 8, ""))))]
            for name, e in s.inits:
                out.append(_set(f"p->hdr[{k}]", _offset(h, name), _width(h, name), _expr(x, e)))
            return out
        case ir.Pop():
            x.moves = True
            return [c.Assign(c.Name(f"p->valid[{x.inst[s.inst]}]"), c.Int(0, ""))]
        case ir.Forward():
            return [c.Assign(_p("egress"), _expr(x, s.port)), c.Assign(_p("egress_set"), c.Int(1, ""))]
        case ir.Drop():
            return [c.Return(c.Int(x.reasons[s.reason], ""))]
        case ir.Verify():
            return [c.If(c.Un("!", _expr(x, s.cond)), (c.Return(c.Int(x.reasons[s.reason], "")),))]
        case ir.Insert():
            return [_insert(x, s)]
        case ir.Refresh():
            return [_refresh(x, s)]
        case ir.Eval() if isinstance(s.expr, ir.ExternCall) and s.expr.name in ESP_ENCRYPT:
            return [_esp_encrypt(x, s.expr)]
        case ir.Eval() if isinstance(s.expr, ir.ExternCall | ir.CounterOp):
            return [c.ExprStmt(_expr(x, s.expr))]
        case ir.Punt():
            return [c.Return(c.Int(_punt_code(x, s.reason, s.span), ""))]
        case ir.Insert() | ir.Remove() | ir.Eval() | ir.Extract():
            raise Unsupported(f"'{type(s).__name__.lower()}' on the server", s.span)
        case _:
            assert_never(s)


def _punt_code(x: _Ctx, reason: str, span: Span) -> int:
    """A punt on a server alone is counted by its reason (no control-plane port there yet);
    behind a switch the packet would have to reach the switch's CPU port, which is not built."""
    if not x.software:
        raise Unsupported("punt on the server behind a switch", span)
    return x.punts[reason]


def _width(h: ir.HeaderType, name: str) -> int:
    return next(f.width for f in h.fields if f.name == name)


def _assign(x: _Ctx, target: ir.LValue, value: c.Expr) -> c.Stmt:
    match target:
        case ir.HeaderField():
            k = x.inst[target.inst]
            h = x.prog.header_of(target.inst)
            if not _can_be_valid(x, target.inst):
                return c.Comment(f"{target.inst} is not valid here: the write does nothing")
            write = _set(f"p->hdr[{k}]", _offset(h, target.field), target.width, value)
            return write if target.inst in x.must else c.If(c.Name(f"p->valid[{k}]"), (write,))
        case ir.MetaField() | ir.Local():
            name = target.name if isinstance(target, ir.MetaField) else "local." + target.name
            stmts = _slot_write(x, "meta", x.meta_slot(name, target.width), target.width,
                                c.Bin("&", value, _mask(target.width)))
            return stmts[0] if len(stmts) == 1 else c.Block(tuple(stmts))
        case ir.RegRead():
            reg = _register(x, target)
            x.register_writes = True
            return c.ExprStmt(c.Call("nfc_reg_set", (c.Name(f"nfc_reg_{reg.name}"), c.Int(reg.size, "u"),
                                                     _expr(x, target.index), c.Bin("&", value, _mask(reg.width)))))
        case _:
            assert_never(target)


ESP_ENCRYPT = {"esp_encrypt": "nfc_esp_encrypt", "esp_encrypt_esn": "nfc_esp_encrypt",
               "esp_encrypt_cbc": "nfc_esp_encrypt_cbc"}  # name -> nfc_esp.h's function
ESP_DECRYPT = ("esp_decrypt", "esp_decrypt_esn", "esp_decrypt_cbc")
_SUITE = {"esp_encrypt_cbc": 2, "esp_decrypt_cbc": 2}  # NFC_ESP_CBC; the others NFC_ESP_GCM (1)


def _esp_instance(x: _Ctx, arg: ir.Expr, op: str) -> int:
    """The header instance an ESP operation ``op`` is handed; its header laid out as RFC 4303's
    (the SPI, then the sequence number: the 8 bytes nfc_esp.c authenticates)."""
    assert isinstance(arg, ir.HeaderRef), "the type checker passes headers to header parameters"
    h = x.prog.header_of(arg.inst)
    if h.name == "esp" and [(f.name, f.width) for f in h.fields] != [("spi", 32), ("seq", 32)]:
        raise Unsupported("an esp header other than RFC 4303's (spi: bit<32>, seq: bit<32>)", h.span)
    x.uses_esp |= _SUITE.get(op, 1)
    return x.inst[arg.inst]


def _esp_encrypt(x: _Ctx, e: ir.ExternCall) -> c.Stmt:
    """esp_encrypt(outer, esp, spi, seq, key material..., src, dst) (compiler/interp/externs.py:
    esp_encrypt and esp_encrypt_esn, a 64-bit sequence number, take key and salt; esp_encrypt_cbc
    key, auth_hi and auth_lo): the arguments first, the checksums of the valid headers after
    ``esp`` written, then nfc_esp_encrypt(_cbc) (those headers and the payload encrypted in place
    or in the packet's ESP buffer, the new payload), then ``outer`` and ``esp`` pushed with their
    fields.  What the crypto cannot take is dropped as crypto_unavailable."""
    outer, esp = (_esp_instance(x, a, e.name) for a in e.args[:2])
    x.temps += 1
    n = x.temps
    args = [f"ea{n}_{i}" for i in range(len(e.args) - 2)]
    esn = [c.Int(int(e.name == "esp_encrypt_esn"), "")] if e.name != "esp_encrypt_cbc" else []
    out: list[c.Stmt] = [c.Comment(f"{e.name}, {_src(e.span)}")]
    out += [c.Decl(_ctype(a.width), name, _expr(x, a)) for name, a in zip(args, e.args[2:], strict=True)]
    for instance in x.prog.instances[esp + 1:]:  # x.inst numbers the instances in packet order
        h, k = x.prog.headers[instance.header], x.inst[instance.name]
        if h.checksum is not None:
            out.append(c.If(c.Name(f"p->valid[{k}]"), tuple(_checksum(h, k, c.Name(f"p->hdr[{k}]")))))
    for instance in x.prog.instances[:esp + 1]:  # nfc_esp_encrypt may move these to p->store
        x.push_bytes = max(x.push_bytes, x.prog.headers[instance.header].bits // 8)
    out += [c.Decl("uint32_t", f"el{n}", c.Call(ESP_ENCRYPT[e.name], (
                c.Name("p"), c.Int(esp, ""), *(c.Name(a) for a in args[:-2]), *esn))),
            c.If(c.Bin("==", c.Name(f"el{n}"), c.Int(0, "u")), (c.Return(c.Int(x.reasons["crypto_unavailable"], "")),))]
    length = c.Bin("&", c.Bin("+", c.Name(f"el{n}"), c.Int(20 + 8, "u")), c.Int(0xFFFF, "u"))
    fields: dict[int, dict[str, c.Expr]] = {
        outer: {"version": c.Int(4, "u"), "ihl": c.Int(5, "u"), "total_len": length, "ttl": c.Int(64, "u"),
                "protocol": c.Int(50, "u"), "src": c.Name(args[-2]), "dst": c.Name(args[-1])},
        esp: {"spi": c.Name(args[0]), "seq": c.Bin("&", c.Name(args[1]), c.Int(0xFFFFFFFF, "ull"))}}
    for k, values in fields.items():
        h = x.prog.header_of(x.prog.instances[k].name)
        x.push_bytes = max(x.push_bytes, h.bits // 8)
        out += [c.Assign(c.Name(f"p->valid[{k}]"), c.Int(1, "")),
                c.Assign(c.Name(f"p->hdr[{k}]"), c.Name(f"p->store[{k}]")),
                c.ExprStmt(c.Call("memset", (c.Name(f"p->hdr[{k}]"), c.Int(0, ""), c.Int(h.bits // 8, ""))))]
        out += [_set(f"p->hdr[{k}]", _offset(h, f), _width(h, f), v) for f, v in values.items()]
    return c.Block(tuple(out))


def _drops_when_false(s: ir.If) -> bool:
    """``if (!esp_decrypt(...)) { drop(r); }``: a failed decryption drops the packet, so it may
    be decrypted in place (what a failure leaves of the payload is never seen)."""
    cond = s.cond
    return (isinstance(cond, ir.Unary) and cond.op == "!" and isinstance(cond.operand, ir.ExternCall) and
            cond.operand.name in ESP_DECRYPT and bool(s.then) and
            isinstance(s.then[0], ir.Drop))


def _server_only(x: _Ctx, what: str, span: Span) -> None:
    """A register, counter or meter lives on one side: not in a stage the switch runs (the server
    has it for the switch cache's misses, and the switch would keep a copy of its own)."""
    if not x.software and x.placement.segment.get(x.stage) is not Segment.SERVER:
        raise Unsupported(f"{what} in stage '{x.stage}', which the switch runs "
                          "(its cache misses here would count in a second copy)", span)


def _register(x: _Ctx, e: ir.RegRead) -> ir.Register:
    """The register ``e`` names, which nf.c then declares (nfc_reg_NAME)."""
    reg = x.prog.registers[e.reg]
    if reg.width > 64:
        raise Unsupported("registers wider than 64 bits on the server", e.span)
    _server_only(x, f"register {reg.name}", e.span)
    x.registers[reg.name] = reg
    return reg


def _counter(x: _Ctx, e: ir.CounterOp) -> ir.Counter:
    """The counter or meter ``e`` names, which nf.c then declares (nfc_cnt_NAME / nfc_met_NAME)."""
    obj = x.prog.counters[e.obj]
    _server_only(x, f"{obj.kind} {obj.name}", e.span)
    x.counters[obj.name] = obj
    return obj


def _object_globals(x: _Ctx) -> list[c.Global]:
    """The registers, counters and meters the server's stages use (nfc_objects.h), one array
    each, and nfc_objects[], which the control channel reads and writes them through.  Registers
    are read and written with relaxed atomic loads and stores, counters added to atomically,
    meters run under a lock per index; an index out of range reads 0 and writes nothing, as the
    reference does."""
    arrays = [c.Global("static uint64_t", f"nfc_reg_{r.name}[{r.size}]", "",
                       f"register {r.name}: bit<{r.width}>[{r.size}], {_src(r.span)}") for r in x.registers.values()]
    arrays += [c.Global(f"static struct {'nfc_count' if o.kind == 'counter' else 'nfc_meter'}",
                        f"nfc_{'cnt' if o.kind == 'counter' else 'met'}_{o.name}[{o.size}]", "",
                        f"{o.kind} {o.name}[{o.size}], {_src(o.span)}") for o in x.counters.values()]
    descs = [_object_desc(r.name, r.span, "NFC_REGISTER", r.size, r.width, f"nfc_reg_{r.name}")
             for r in x.registers.values()]
    descs += [_object_desc(o.name, o.span, "NFC_COUNTER" if o.kind == "counter" else "NFC_METER", o.size, 0,
                           f"nfc_{'cnt' if o.kind == 'counter' else 'met'}_{o.name}") for o in x.counters.values()]
    return [*arrays, c.Global("const int", "nfc_nobjects", str(len(descs))),
            c.Global("struct nfc_object", f"nfc_objects[{max(1, len(descs))}]", tuple(descs) or "{{0}}",
                     "the registers, counters and meters above, as the control channel serves them")]


def _object_desc(name: str, span: Span, kind: str, size: int, width: int, data: str) -> c.Init:
    return c.Init((("name", f'"{name}"'), ("src", f'"{_src(span)}"'), ("kind", kind), ("size", f"{size}u"),
                   ("width", f"{width}u"), ("data", data)), f"{name}, {_src(span)}")


def _lookup(x: _Ctx, s: ir.Lookup) -> list[c.Stmt]:
    t = x.prog.tables[s.table]
    size = _lookup_bytes(x, t)
    x.temps += 1
    num = x.temps  # this lookup's names: the key and values (and nested lookups) take more temps
    key, data = f"key{num}", f"hit{num}"
    as_taken = _as_prefetched(x, t)
    x.written |= stmt_writes(x.prog, s)  # its results, which its arms (lowered next) may read
    out: list[c.Stmt] = [c.Comment(f"lookup {t.name}, {_src(s.span)}")]
    if as_taken:  # the burst's kept answer, else the key built and looked up
        outer, x.hoisted = x.hoisted, []
        fill = _key(x, t, key, size)
        fill, x.hoisted = [*x.hoisted, *fill], outer
        find = c.Call("nfc_lpm_find", (c.Name(f"&nfc_tables[{x.tindex[t.name]}].trie"), c.Name(key),
                                       c.Name(f"&{data}"))) if _lpm_key(t) else \
            c.Call("nfc_exact_find", (c.Int(x.tindex[t.name], ""), c.Name(key), c.Name(f"&{data}")))
        out += [c.Decl("void *", data, c.Name("NULL")),
                c.Decl("int", f"found{num}", c.Call("nfc_kept_answer", (c.Name("p"), c.Int(x.tindex[t.name], ""),
                                                                        c.Name(f"&{data}")))),
                c.If(c.Bin("<", c.Name(f"found{num}"), c.Int(0, "")),
                     (*fill, c.Assign(c.Name(f"found{num}"), find)))]
    else:
        out += [*_key(x, t, key, size), c.Decl("void *", data, c.Name("NULL"))]
    v = c.Name(f"v{num}")
    hit: list[c.Stmt]
    if values_inline(t, x.memory):  # the values packed into the data word itself: no second memory access
        hit = [c.Decl("uint64_t", v.name, c.Cast("uint64_t", c.Cast("uintptr_t", c.Name(data))))]
        shift = 0
        for f in t.values:
            hit.append(c.Assign(c.Name(f"p->res[{_res(x, t.name, f.name, f.width)}]"),
                                c.Bin("&", c.Bin(">>", v, c.Int(shift, "u")), _mask(f.width))))
            shift += f.width
    else:
        hit = [c.Decl("uint64_t *", v.name, c.Cast("uint64_t *", c.Name(data)))]
        if t.is_state and t.hints.refresh:  # a hit restarts the idle timer
            hit.append(_touch(t, v))
        word = 0  # a record holds a value of over 64 bits in two words, low first (nfc_values.c)
        for f in t.values:
            slot = _res(x, t.name, f.name, f.width)
            for j in range(_words(f.width)):
                hit.append(c.Assign(c.Name(f"p->res[{slot + j}]"), c.Index(v, c.Int(word + j, ""))))
            word += _words(f.width)
    hit.append(_count(x, "hits", t))
    if _tracked(x, t):
        hit.append(c.ExprStmt(c.Call("nfc_hit_note", (c.Int(x.tindex[t.name], ""), c.Name(key), c.Int(size, "u")))))
    outer_hit, x.hit_of = x.hit_of, ((t, v.name) if _links(x, t) else x.hit_of)
    on_hit, on_miss = _branches(x, s, first_only=lambda: setattr(x, "hit_of", outer_hit))
    x.hit_of = outer_hit
    hit += on_hit
    if v.name not in names_used(tuple(hit[1:])):  # no value to read, idle timer to restart or link to note
        hit = hit[1:]
    found: c.Expr
    if as_taken:
        found = c.Name(f"found{num}")
    elif acl_table(t):  # maybe classified with the burst's other packets
        found = c.Call("nfc_acl_lookup", (c.Name("p"), c.Int(x.tindex[t.name], ""), c.Name(key), c.Int(size, "u"),
                                          c.Name(f"&{data}")))
    elif not t.is_state:  # maybe answered by the burst's bulk lookup
        found = c.Call("nfc_lpm_lookup" if _lpm_key(t) else "nfc_exact_lookup",
                       (c.Name("p"), c.Int(x.tindex[t.name], ""), c.Name(key), c.Int(size, "u"), c.Name(f"&{data}")))
    else:  # an expired entry is removed and misses (nfc_state.h)
        found = c.Call("nfc_state_find", (_table(x, t), c.Name(key), c.Name(f"&{data}")))
    out.append(c.If(found, tuple(hit), (_count(x, "misses", t), *on_miss)))
    return [c.Block(tuple(out))]


def _as_prefetched(x: _Ctx, t: ir.Table) -> bool:
    """Whether a lookup of ``t`` here has the key nfc_prefetch took for it as the packet arrived:
    a control-plane table whose answers are kept (not one whose hits are sampled: that needs the
    key), its key a function of the packet that no statement lowered before it in this cut
    writes.  Then the kept answer is the lookup's, with no key built or compared."""
    if not _kept(x, t) or acl_table(t) or _tracked(x, t):
        return False
    if any(isinstance(n, ir.ExternCall | ir.RegRead | ir.CounterOp) for k in t.keys for n in walk_expr(k.expr)):
        return False
    reads: set[Loc] = set().union(*(expr_reads(k.expr) for k in t.keys))
    return not changed_by(reads, x.written)


def _count(x: _Ctx, counter: str, t: ir.Table) -> c.Stmt:
    slot = c.Name(f"p->stats->{counter}[{x.tindex[t.name]}]")
    return c.Assign(slot, c.Bin("+", slot, c.Int(1, "")))


def _key(x: _Ctx, t: ir.Table, key: str, size: int) -> list[c.Stmt]:
    """Declare ``key`` and fill it with the table's key fields as the packet has them now."""
    return [c.Decl("uint8_t", f"{key}[{size}]"), *_pack(x, key, size, _key_fields(x, t))]


def _key_fields(x: _Ctx, t: ir.Table) -> list[tuple[int, int, c.Expr]]:
    """The key fields as ``_pack`` takes them: (bit offset, width, value); an ACL table's in
    rte_acl's layout (_lookup_bytes)."""
    fields: list[tuple[int, int, c.Expr]] = []
    off = 32 if acl_table(t) else 0
    for k in t.keys:
        w = k.expr.width
        slot = 32 * ((w + 31) // 32) if acl_table(t) else w
        fields.append((off + slot - w, w, _expr(x, k.expr)))
        off += slot
    return fields


def _touch(t: ir.Table, record: c.Expr) -> c.Stmt:
    """Restart the idle timer of a state entry (and of the port it holds, nfc_state.h)."""
    touch = "nfc_state_touch" if t.holds_ports is None else "nfc_state_touch_held"
    words = sum(_words(f.width) for f in t.values)  # the record's value words (a wide value takes two)
    return c.ExprStmt(c.Call(touch, (record, c.Int(words, ""))))


def _refresh(x: _Ctx, s: ir.Refresh) -> c.Stmt:
    """The current key's live entry, if any, restarts its idle timer."""
    t = x.prog.tables[s.state]
    size = _key_bytes(x, t)
    x.temps += 1
    key, data = f"key{x.temps}", f"hit{x.temps}"
    found = c.Call("nfc_state_find", (_table(x, t), c.Name(key), c.Name(f"&{data}")))
    note: tuple[c.Stmt, ...] = ()
    if x.hit_of is not None:  # in the hit arm of a switch-cached state: the hit's link to this key
        owner, record = x.hit_of
        note = (c.ExprStmt(c.Call("nfc_state_link", (_table(x, owner), c.Name(record),
                                                     c.Int(_links(x, owner).index(t.name), "u"), c.Name(key)))),)
    return c.Block((c.Comment(f"refresh {t.name}, {_src(s.span)}"), *_key(x, t, key, size),
                    c.Decl("void *", data, c.Name("NULL")), *note,
                    c.If(found, (_touch(t, c.Cast("uint64_t *", c.Name(data))),), ())))


def timeout_ns_of(t: ir.Table) -> int:
    """A state table's idle timeout in ns (300 s when it names none), rounded, not truncated."""
    return round((t.timeout or 300.0) * 1e9)


def _insert(x: _Ctx, s: ir.Insert) -> c.Stmt:
    """Create or replace the entry of the current key: its values and timeout (ns) to
    nfc_state_insert (nfc_state.h), which every forwarding lcore may call."""
    t = x.prog.tables[s.state]
    size = _key_bytes(x, t)
    x.temps += 1
    key, v = f"key{x.temps}", f"v{x.temps}"
    given = dict(s.values)
    # the entry's timeout in ns: an insert's own (whole seconds) or the table's (1ms is 1000000, not 0)
    timeout_ns: c.Expr = (c.Bin("*", _expr(x, s.timeout), c.Int(1_000_000_000, "ull")) if s.timeout is not None
                          else c.Int(timeout_ns_of(t), "ull"))
    words = sum(_words(f.width) for f in t.values)
    body: list[c.Stmt] = [c.Comment(f"insert into {t.name}, {_src(s.span)}"), *_key(x, t, key, size),
                          c.Decl("uint64_t", f"{v}[{max(words, 1)}]", c.Name("{0}"))]
    word = 0
    for f in t.values:
        value = c.Bin("&", _expr(x, given[f.name]), _mask(f.width))
        if f.width <= 64:
            body.append(c.Assign(c.Index(c.Name(v), c.Int(word, "")), value))
        else:  # two words, low first
            x.temps += 1
            wide = c.Name(f"w{x.temps}")
            body += [c.Decl("nfc_u128", wide.name, value),
                     c.Assign(c.Index(c.Name(v), c.Int(word, "")), c.Cast("uint64_t", wide)),
                     c.Assign(c.Index(c.Name(v), c.Int(word + 1, "")),
                              c.Cast("uint64_t", c.Bin(">>", wide, c.Int(64, "u"))))]
        word += _words(f.width)
    insert = c.Call("nfc_state_insert", (_table(x, t), c.Name(key), c.Name(v), timeout_ns))
    if t.holds_ports is not None:  # the entry holds this port of this address (nfc_state.h)
        addr, port = (_expr(x, t.keys[i].expr) for i in t.holds_ports)
        insert = c.Call("nfc_state_insert_held", (_table(x, t), c.Name(key), c.Name(v), timeout_ns, addr, port))
    body.append(c.If(c.Bin("<", insert, c.Int(0, "")), (c.Return(c.Int(x.reasons["bad_bridge"], "")),)))
    return c.Block(tuple(body))


def _res(x: _Ctx, table: str, fname: str, width: int) -> int:
    """The first slot of a lookup result field in p->res (two for a field over 64 bits)."""
    if (table, fname) not in x.res:
        if x.nres + _words(width) > 64:
            raise Unsupported("more than 64 words of lookup result fields", Span(x.prog.file, 1, 1, 1, 1))
        x.res[(table, fname)] = x.nres
        x.nres += _words(width)
    return x.res[(table, fname)]


def _expr(x: _Ctx, e: ir.Expr) -> c.Expr:
    """``e`` as a C expression: uint64_t, or nfc_u128 for a value over 64 bits (its leaves
    widened, so that ~, - and shifts work on all of its bits)."""
    if e.width > MAX_WIDTH:
        raise Unsupported(f"values wider than {MAX_WIDTH} bits", e.span)
    match e:
        case ir.Const():
            # a small constant of a wide type is widened: ~0 of 128 bits has 128 ones
            return c.Cast("nfc_u128", _const(e.value)) if e.width > 64 and not e.value >> 64 else _const(e.value)
        case ir.HeaderField():
            k = x.inst[e.inst]
            h = x.prog.header_of(e.inst)
            if not _can_be_valid(x, e.inst):
                return c.Int(0, "ull")
            get = _get(c.Name(f"p->hdr[{k}]"), _offset(h, e.field), e.width)
            return get if e.inst in x.must else c.Cond(c.Name(f"p->valid[{k}]"), get, c.Int(0, "ull"))
        case ir.MetaField():
            return _slot_read("meta", x.meta_slot(e.name, e.width), e.width)
        case ir.Local():
            return _slot_read("meta", x.meta_slot("local." + e.name, e.width), e.width)
        case ir.StdField():
            if e.name == "packet_length":
                return _packet_length(x)
            if e.name != "ingress_port":
                raise Unsupported(f"std.{e.name} on the server", e.span)
            return _p("ingress_port")
        case ir.Result():
            return _slot_read("res", _res(x, e.table, e.field, e.width), e.width)
        case ir.Valid():
            if e.inst in x.must or not _can_be_valid(x, e.inst):
                return c.Int(int(e.inst in x.must), "ull")
            return c.Cast("uint64_t", c.Name(f"p->valid[{x.inst[e.inst]}]"))
        case ir.ChecksumOk():
            if not _can_be_valid(x, e.inst):
                return c.Int(0, "ull")
            k = x.inst[e.inst]
            size = x.prog.header_of(e.inst).bits // 8
            return c.Bin("&&", c.Name(f"p->valid[{k}]"),
                         c.Bin("==", c.Call("nfc_csum", (c.Name(f"p->hdr[{k}]"), c.Int(size, "u"))), c.Int(0, "u")))
        case ir.Unary():
            inner = _expr(x, e.operand)
            if e.op == "!":
                return c.Un("!", inner)
            return c.Bin("&", c.Un(e.op, inner), _mask(e.width))
        case ir.Binary():
            return _binary(x, e)
        case ir.Slice():
            return c.Bin("&", c.Bin(">>", _expr(x, e.base), c.Int(e.lo, "u")), _mask(e.width))
        case ir.Cast():
            inner = _expr(x, e.operand)
            if e.width == ir.BOOL:
                return c.Bin("!=", inner, c.Int(0, "ull"))
            return c.Bin("&", c.Cast(_ctype(e.width), inner), _mask(e.width))
        case ir.Hash():
            return _hash(x, e)
        case ir.CsumUpdate():
            return c.Call("nfc_csum_update", (_expr(x, e.csum), _expr(x, e.old), _expr(x, e.new),
                                              c.Int(e.old.width, "u")))
        case ir.ExternCall() if e.name == "alloc_port":
            return c.Call("nfc_alloc_port", (_expr(x, e.args[0]),))
        case ir.ExternCall() if e.name in ("replay_check", "replay_check_esn"):  # one window per SA, 64-bit
            return c.Call("nfc_replay_check", (_expr(x, e.args[0]), _expr(x, e.args[1])))
        case ir.ExternCall() if e.name == "esn_high":
            return c.Call("nfc_esn_high", (_expr(x, e.args[0]), _expr(x, e.args[1])))
        case ir.ExternCall() if e.name == "esp_decrypt_cbc":
            outer, esp = (_esp_instance(x, a, e.name) for a in e.args[:2])
            return c.Call("nfc_esp_decrypt_cbc", (c.Name("p"), c.Int(outer, ""), c.Int(esp, ""),
                                                  *(_expr(x, a) for a in e.args[2:]), c.Int(int(x.failure_drops), "")))
        case ir.ExternCall() if e.name in ESP_DECRYPT:
            outer, esp = (_esp_instance(x, a, e.name) for a in e.args[:2])
            esn = e.name == "esp_decrypt_esn"
            return c.Call("nfc_esp_decrypt", (c.Name("p"), c.Int(outer, ""), c.Int(esp, ""), _expr(x, e.args[2]),
                                              _expr(x, e.args[3]), c.Int(int(esn), ""),
                                              _expr(x, e.args[4]) if esn else c.Int(0, "u"),
                                              c.Int(int(x.failure_drops), "")))
        case ir.RegRead():
            reg = _register(x, e)
            return c.Call("nfc_reg_get", (c.Name(f"nfc_reg_{reg.name}"), c.Int(reg.size, "u"), _expr(x, e.index)))
        case ir.CounterOp():
            obj = _counter(x, e)
            fn, arr = ("nfc_count_add", "nfc_cnt") if obj.kind == "counter" else ("nfc_meter_execute", "nfc_met")
            return c.Call(fn, (c.Name(f"{arr}_{obj.name}"), c.Int(obj.size, "u"), _expr(x, e.index),
                               c.Call("nfc_pkt_len", (c.Name("p"),))))
        case ir.HeaderRef() | ir.ExternCall():
            raise Unsupported(f"{type(e).__name__} expressions on the server", e.span)
        case _:
            assert_never(e)


def _binary(x: _Ctx, e: ir.Binary) -> c.Expr:
    a, b = _expr(x, e.left), _expr(x, e.right)
    settled = _against_zero(e, a, b)
    if settled is not None:
        return settled
    if e.op in ("&&", "||", "==", "!=", "<", "<=", ">", ">="):
        return c.Bin(e.op, a, b)
    if e.op == "++":
        wide = c.Cast("nfc_u128", a) if e.width > 64 else a  # (a 64-bit left half would shift out)
        return c.Bin("|", c.Bin("<<", wide, c.Int(e.right.width, "u")), b)
    if e.op in ("<<", ">>"):
        shifted = c.Bin(e.op, a, b)
        return c.Cond(c.Bin("<", b, c.Int(e.width, "ull")), c.Bin("&", shifted, _mask(e.width)), c.Int(0, "ull"))
    return c.Bin("&", c.Bin(e.op, a, b), _mask(e.width))


# an unsigned comparison with 0 that always holds or always fails: (op, 0 on the right) -> its value
_SETTLED = {(">=", True): 1, ("<", True): 0, ("<=", False): 1, (">", False): 0}


def _against_zero(e: ir.Binary, a: c.Expr, b: c.Expr) -> c.Expr | None:
    """``x >= 0``, ``x < 0`` (and mirrored) as their constant value: gcc's -Wtype-limits rejects
    the comparison itself.  An operand calling an extern is still evaluated, once."""
    for right, zero, other, operand in ((True, e.right, a, e.left), (False, e.left, b, e.right)):
        value = _SETTLED.get((e.op, right))
        if value is None or not (isinstance(zero, ir.Const) and zero.value == 0):
            continue
        if any(isinstance(n, ir.ExternCall) for n in walk_expr(operand)):
            return c.Bin("||" if value else "&&", c.Bin("==", other, c.Int(0, "ull")), c.Int(value, ""))
        return c.Int(value, "")
    return None


def _hash(x: _Ctx, e: ir.Hash) -> c.Expr:
    x.temps += 1
    buf = f"hb{x.temps}"
    bits = sum(a.width for a in e.args)
    size = (bits + 7) // 8
    fields: list[tuple[int, int, c.Expr]] = []
    off = 0
    for a in e.args:
        fields.append((off, a.width, _expr(x, a)))
        off += a.width
    x.hoisted += [c.Decl("uint8_t", f"{buf}[{max(size, 1)}]"), *_pack(x, buf, max(size, 1), fields)]
    return c.Call("nfc_crc16" if e.alg == "crc16" else "nfc_crc32", (c.Name(buf), c.Int(size, "u")))


# ---- tables -----------------------------------------------------------------------------------

def _bench_key(x: _Ctx, tables: list[ir.Table]) -> c.Func:
    """The key a packet in state ``p`` looks up in each table (the burst's bulk lookups,
    nfc_prefetch, and the benchmark); -1: the packet's cut runs no stage that looks it up."""
    body: list[c.Stmt] = []
    cuts = _cuts(x)
    users = _users(x, cuts)
    for t in tables:
        using = users.get(t.name, [])
        # the key as the packet arrives: the headers valid on entry to every cut that looks it up;
        # stage by stage, that is the key of the first stage when every such cut looks it up there
        if x.stage_major and using and all(t.name in _tables_of(x, cut.stages[0]) for cut in using):
            args = (c.Int(0, ""), c.Name("table"), c.Name("p"), c.Name("key"))
            fill: list[c.Stmt] = [c.Return(c.Call("nfc_stage_key", args))]
        else:
            fill = _key_fill(x, t, using, len(cuts), [(cut.must, cut.may) for cut in using])
        body.append(c.If(c.Bin("==", c.Name("table"), c.Int(x.tindex[t.name], "")), tuple(fill)))
    body.append(c.Return(c.Int(-1, "")))
    params = ("int table", "const struct nfc_pkt *p", "uint8_t *key")
    return c.Func("int", "nfc_bench_key", params, tuple(body),
                  "the key bytes of a lookup, of a packet nfc_from_switch took (NFC_CONTINUE)", static=False)


def _users(x: _Ctx, cuts: list[_Cut]) -> dict[str, list[_Cut]]:
    """Table -> the cuts (in order) whose stages look it up: one pass over the cuts' stages, not
    one per table (was O(tables x stages))."""
    out: dict[str, list[_Cut]] = {}
    for cut in cuts:
        looked_up = dict.fromkeys(name for s in cut.stages for name in _tables_of(x, s))
        for name in looked_up:
            out.setdefault(name, []).append(cut)
    return out


def _phase_users(x: _Ctx, cuts: list[_Cut]) -> dict[int, dict[str, list[_Cut]]]:
    """Phase -> table -> the cuts (in order) whose stage of that phase looks it up: one pass
    over the cuts' stages, not one per phase and table (was O(stages x tables))."""
    out: dict[int, dict[str, list[_Cut]]] = {}
    for cut in cuts:
        for j, s in enumerate(cut.stages):
            for t in _tables_of(x, s):
                out.setdefault(j, {}).setdefault(t, []).append(cut)
    return out


def _stage_key(x: _Ctx, tables: list[ir.Table]) -> c.Func:
    """nfc_stage_key: the key of table ``table`` a packet has at the entry of its cut's stage
    ``phase`` (x.stage_major: nfc_prefetch looks the burst's up in bulk there); -1: that stage
    of the packet's cut does not look it up."""
    body: list[c.Stmt] = []
    cuts = _cuts(x)
    rank = {t.name: k for k, t in enumerate(tables)}
    phases = _phase_users(x, cuts) if x.stage_major else {}
    for j, users in sorted(phases.items()):
        for name in sorted((t for t in users if t in rank), key=rank.__getitem__):  # in the order of ``tables``
            t, using = tables[rank[name]], users[name]
            fill = _key_fill(x, t, using, len(cuts), [x.stage_entry[(cut.id, j)] for cut in using])
            body.append(c.If(c.Bin("&&", c.Bin("==", c.Name("phase"), c.Int(j, "")),
                                   c.Bin("==", c.Name("table"), c.Int(x.tindex[t.name], ""))), tuple(fill)))
    body.append(c.Return(c.Int(-1, "")))
    params = ("int phase", "int table", "const struct nfc_pkt *p", "uint8_t *key")
    return c.Func("int", "nfc_stage_key", params, tuple(body),
                  "the key bytes of table `table` at the entry of stage `phase` of the packet's cut; -1: not "
                  "looked up there", static=False)


def _key_fill(x: _Ctx, t: ir.Table, using: list[_Cut], cuts: int,
              valid: list[tuple[frozenset[str], frozenset[str] | None]]) -> list[c.Stmt]:
    """``key`` := the key of ``t`` (then return 0) for a packet of the cuts ``using`` (of ``cuts``;
    another: return -1), where the headers valid on every path and possibly are ``valid``'s,
    one pair per cut."""
    if any(isinstance(n, ir.ExternCall | ir.CounterOp) for k in t.keys for n in walk_expr(k.expr)):
        return [c.Return(c.Int(-1, ""))]  # built ahead, its extern or counter would run twice
    x.hoisted = []
    x.must = frozenset.intersection(*(must for must, _ in valid)) if valid else frozenset()
    mays = [may for _, may in valid]
    x.may = frozenset().union(*(m for m in mays if m is not None)) if mays and None not in mays else None
    fill = _pack(x, "key", _lookup_bytes(x, t), _key_fields(x, t))
    x.must, x.may = frozenset(), None
    fill = [*x.hoisted, *fill, c.Return(c.Int(0, ""))]
    if len(using) < cuts:
        cond: c.Expr = c.Int(0, "")
        for cut in using:
            hit = c.Bin("==", _p("cut"), c.Int(cut.id, "u"))
            cond = hit if cond == c.Int(0, "") else c.Bin("||", cond, hit)
        fill.insert(0, c.If(c.Un("!", cond), (c.Return(c.Int(-1, "")),)))
    return fill


def _reason_fn(x: _Ctx) -> c.Func:
    body: list[c.Stmt] = [c.If(c.Bin("==", c.Name("code"), c.Int(code, "")), (c.Return(c.Name(f'"{r}"')),))
                          for r, code in (x.reasons | x.punts).items()]
    body.append(c.Return(c.Name('"unknown"')))
    return c.Func("const char *", "nfc_reason", ("int code",), tuple(body),
                  "drop reason names by code (NFC_PUNT_BASE and up: punt reasons)",
                  static=False)
