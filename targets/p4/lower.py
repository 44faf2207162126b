"""Placed IR → P4_16 syntax tree for the switch part, for any ``Arch``.

The switch program has one ingress parser and control for every pipeline:

* the parser's start state selects on the ingress port: a server-facing port leads to
  the bridge-header states (which re-parse the packet from the bridge's validity bits),
  other ports to the pipeline's own parse graph;
* the ingress first applies what the reference semantics does while parsing (``verify``
  conditions in parse order, parser drops, truncation), then the pipeline's switch
  stages before the server (segment 0); a pipeline with a server part then pushes the
  bridge header and sends the packet to the server port; packets back from the server
  restore their metadata from the bridge and run the switch stages after the server;
* drops set the architecture's drop flag, count the reason and ``exit``; a pipeline
  that ends without a port drops with ``no_egress``.

Every generated table, action, state and stage block carries a comment with the
``.nfp`` line it came from.  Constructs the generator does not support yet raise
``Unsupported`` with the span, reported as a diagnostic by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import assert_never

from compiler import ir
from compiler.analysis import (
    changed_by,
    drop_reasons,
    expr_reads,
    loc_of,
    stmt_exprs,
    stmt_writes,
    walk_expr,
    walk_stmts,
)
from compiler.ir import Span
from compiler.passes.validity import must_be_valid, must_branches, must_step, packet_order
from compiler.placement import EGRESS, EGRESS_SET, Bridge, Direction, Placement, Segment, find_bridge
from compiler.register_access import NotOne, OneAccess, accessed_registers, one_access
from compiler.shard import steering
from targets.generator import GeneratorError
from targets.p4 import syntax as p
from targets.p4.arch import Arch

__all__ = ["NameMap", "Unsupported", "lower_switch"]



class Unsupported(GeneratorError):
    """A construct the P4 generator does not lower (yet)."""


@dataclass
class NameMap:
    """``.nfp`` names → generated names (the runtime and the P4Info builder read this)."""

    tables: dict[str, dict[str, object]] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    punts: dict[str, int] = field(default_factory=dict)
    pipelines: dict[str, int] = field(default_factory=dict)
    bridges: dict[int, str] = field(default_factory=dict)


def _src(span: Span) -> str:
    return f"{span.file}:{span.line}"


@dataclass
class _Deferred:
    """An Internet checksum updated by ``csum_update`` chains that the ingress deparser's
    checksum engine computes (``Arch.deparser_checksum``): RFC 1624 eqn. 3 chained is
    ~(~HC + ~m1 + m1' + ~m2 + m2' ...), a one's complement sum the engine takes over metadata
    words the stage writes (one ALU operation each), for the packets whose flag is set; in the
    ALUs the sum and its folds would span stages, which the Tofino back end refuses."""

    name: str  # the flag; the words are <name>_sum, <name>_old<i>, <name>_new<i>
    widths: tuple[int, ...]  # each update's slot width, in order (the widest of the chains)
    zeros_as_ones: bool  # the chains end with ``if (c == 0) c = 0xffff`` (RFC 768)
    pos: int = 0  # in the stage being lowered: the next update's slot


@dataclass
class _Ctx:
    prog: ir.Program
    arch: Arch
    placement: Placement
    bridges: tuple[Bridge, ...]
    server_ports: tuple[int, ...]
    cpu_port: int = 192
    names: NameMap = field(default_factory=NameMap)
    locals: list[p.Instance | p.Action | p.Table] = field(default_factory=list)
    parser_locals: list[p.Instance] = field(default_factory=list)
    meta_fields: dict[str, p.Type] = field(default_factory=dict)
    hashes: int = 0
    hoisted: list[p.Stmt] = field(default_factory=list)
    # the stage being lowered: the hashes computed at its start (``_early_hashes``), by id,
    # their statements, and the headers valid on entry
    early: frozenset[int] = frozenset()
    prelude: list[p.Stmt] = field(default_factory=list)
    stage_must: frozenset[str] = frozenset()
    # the checksum fields the ingress deparser's engine computes (``_deferred_checksums``)
    deferred: dict[tuple[str, str], _Deferred] = field(default_factory=dict)
    # in a stage, the headers valid on every path to the statement being lowered (reads of
    # the others are guarded); None elsewhere (parser selects, verify conditions: the caller
    # guards them)
    must: frozenset[str] | None = None
    must_at: dict[str, frozenset[str]] = field(default_factory=dict)
    csum_checked: set[str] = field(default_factory=set)
    # registers: the one read-modify-write of each in the stage being lowered, what a read of
    # it lowers to (its metadata copy; the ALU's ``value`` inside a RegisterAction), and the
    # switch stage that accesses each (a packet passes a register's stateful ALU once)
    accesses: dict[str, OneAccess] = field(default_factory=dict)
    reg_value: dict[str, p.Expr] = field(default_factory=dict)
    reg_in_range: dict[str, p.Expr | None] = field(default_factory=dict)  # None: every index is in range
    reg_stage: dict[str, str] = field(default_factory=dict)
    # (parser, the header extracted before it, verify), in parse-graph order
    verifies: list[tuple[str, str, ir.Verify]] = field(default_factory=list)

    def meta(self, name: str, type_: p.Type) -> p.Expr:
        self.meta_fields.setdefault(name, type_)
        return p.Member(p.Path("meta"), name)


def lower_switch(prog: ir.Program, placement: Placement, bridges: tuple[Bridge, ...], server_ports: tuple[int, ...],
                 arch: Arch, cpu_port: int = 192) -> tuple[p.Program, NameMap]:
    c = _Ctx(prog, arch, placement, bridges, server_ports, cpu_port, must_at=must_be_valid(prog))
    if arch.deparser_checksum:
        c.deferred = _deferred_checksums(prog, placement)
    taken = [pl for pl in prog.pipelines if pl.has_port(cpu_port)]
    if cpu_port in server_ports or taken:
        what = f"pipeline '{taken[0].name}'" if taken else "a server"
        raise Unsupported(f"the CPU port {cpu_port} (the switch profile's cpu_port) is also a port of {what}",
                          taken[0].span if taken else Span(prog.file, 1, 1, 1, 1))
    c.names.reasons = {r: i + 1 for i, r in enumerate(drop_reasons(prog))}
    c.names.pipelines = {pl.name: i + 1 for i, pl in enumerate(prog.pipelines)}
    c.names.punts = {r: i + 1 for i, r in enumerate(sorted(_punt_reasons(prog)))}
    c.names.bridges = {b.cut_id: f"nfc_bridge{b.cut_id}" for b in bridges}
    for name in ("nfc_pipeline", "nfc_cut", "nfc_drop", "nfc_punt", "nfc_resume"):
        c.meta(name, p.Bits(8))
    c.meta("nfc_forwarded", p.Bits(1))
    parser = _parser(c)
    ingress = _ingress(c)
    headers = _header_types(c)
    hdr_struct = p.Struct("headers_t", tuple((name, p.TypeName(type_)) for name, type_ in (
                              ("nfc_packet_in", "nfc_packet_in_h"), ("nfc_packet_out", "nfc_packet_out_h"),
                              *((f"nfc_bridge{b.cut_id}", f"nfc_bridge{b.cut_id}_h") for b in bridges),
                              *((i.name, f"{i.header}_h") for i in prog.instances))),
                          "bridge headers lead the packet on the server link; then the .nfp packet layout, in order")
    user_meta = tuple((f.name, _bits(f.width)) for f in prog.metadata)
    meta_struct = p.Struct("metadata_t", user_meta + tuple(sorted(c.meta_fields.items())))
    parser = _with_metadata_init(parser, meta_struct)
    emit = tuple(p.CallStmt(p.Call(p.ref("pkt.emit"), (p.ref(f"hdr.{n}"),))) for n, _ in hdr_struct.fields)
    rest = arch.rest("headers_t", "metadata_t", emit, _csum_updates(prog), parser.name, ingress.name,
                     _deparser_checksums(c))
    reason_consts = tuple(p.ConstDecl(p.Bits(8), f"NFC_DROP_{r.upper()}", p.Const(code, 8))
                          for r, code in c.names.reasons.items())
    reason_consts += tuple(p.ConstDecl(p.Bits(8), f"NFC_PUNT_{r.upper()}", p.Const(code, 8))
                           for r, code in c.names.punts.items())
    reason_consts += (p.ConstDecl(p.Bits(16), "NFC_CPU_PORT", p.Const(cpu_port, 16),
                                  "the switch port of the control plane (packet-in / packet-out)"),)
    preamble = (f"// Generated by nfc from {prog.file} for {arch.name}. Do not edit: edit the .nfp source.",
                *arch.includes)
    decls: tuple[p.Decl, ...] = (*reason_consts, *headers, hdr_struct, meta_struct, parser, ingress, *rest)
    return p.Program(preamble, decls), c.names


def _punt_reasons(prog: ir.Program) -> set[str]:
    in_stages = {s.reason for st in prog.stages.values() for s in walk_stmts(st.body) if isinstance(s, ir.Punt)}
    return in_stages | _parser_ends(prog, "punt")


def _parser_ends(prog: ir.Program, kind: str) -> set[str]:
    """The reasons of the parsers' transitions to a ``drop`` or a ``punt`` (``kind``)."""
    return {t.name for g in prog.parsers.values() for st in g.states
            for t in (*[x.target for x in st.cases], st.default) if t.kind == kind}


def _with_metadata_init(parser: p.Parser, meta: p.Struct) -> p.Parser:
    """Zero every metadata field in the start state: the reference semantics starts from 0,
    and TNA does not initialise metadata by itself."""
    inits = tuple(p.Assign(p.Member(p.Path("meta"), name), p.Const(0, t.width if isinstance(t, p.Bits) else 0))
                  for name, t in meta.fields)
    start = parser.states[0]
    return replace(parser, states=(replace(start, body=start.body + inits), *parser.states[1:]))


def _bits(width: int) -> p.Type:
    return p.Bool() if width == ir.BOOL else p.Bits(width)


# ---- types -----------------------------------------------------------------------------------

def _header_types(c: _Ctx) -> tuple[p.HeaderType, ...]:
    used = {i.header for i in c.prog.instances}
    out = [p.HeaderType("nfc_packet_in_h", (("reason", p.Bits(8)), ("ingress_port", p.Bits(16))),
                        "to the control plane (P4Runtime packet-in)",
                        (p.Annotation("controller_header", "packet_in"),)),
           p.HeaderType("nfc_packet_out_h", (("egress_port", p.Bits(16)),),
                        "from the control plane (P4Runtime packet-out): send the rest out of egress_port",
                        (p.Annotation("controller_header", "packet_out"),))]
    out += [p.HeaderType(f"{h.name}_h", tuple((f.name, _bits(f.width)) for f in h.fields), f"from {_src(h.span)}")
            for h in c.prog.headers.values() if h.name in used]
    for b in c.bridges:
        fields: list[tuple[str, p.Type]] = [("cut_id", p.Bits(8)), *((f"v_{n}", p.Bits(1)) for n in b.valid_bits)]
        laid = [(f.offset, _bridge_field(f.name), _bits(f.width)) for f in b.fields]
        laid += [(off, _pad_name(b, off), p.Bits(width)) for off, width in b.pads()]
        fields += [(name, t) for _, name, t in sorted(laid, key=lambda f: f[0])]
        out.append(p.HeaderType(f"nfc_bridge{b.cut_id}_h", tuple(fields),
                                f"bridge #{b.cut_id}: pipeline {b.pipeline}, {b.path}, {b.direction.value}"))
    return tuple(out)


def _bridge_field(name: str) -> str:
    return name.replace(".", "_")


def _pad_name(b: Bridge, offset: int) -> str:
    """``pad`` when the bridge has one run of padding, else ``pad0``, ``pad1``, … in order."""
    pads = b.pads()
    return "pad" if len(pads) == 1 else f"pad{[off for off, _ in pads].index(offset)}"


# ---- parser ----------------------------------------------------------------------------------

def _parser(c: _Ctx) -> p.Parser:
    arch, prog = c.arch, c.prog
    states: list[p.State] = []
    cases = [p.Case((_port_key(arch, c.cpu_port),), "nfc_packet_out")]
    cases += [p.Case((_port_key(arch, port),), "nfc_from_server") for port in c.server_ports]
    for pl in prog.pipelines:
        if any(pl.ports == other.ports for other in prog.pipelines if other is not pl) or pl.when is not None:
            raise Unsupported(f"pipelines sharing ports (selection by 'when'), as '{pl.name}' does", pl.span)
        for lo, hi in pl.ports:
            key = _port_key(arch, lo) if lo == hi else p.Range(_port_key(arch, lo), _port_key(arch, hi))
            cases.append(p.Case((key,), f"nfc_enter_{pl.name}"))
        states.append(p.State(f"nfc_enter_{pl.name}",
                              (p.Assign(p.ref("meta.nfc_pipeline"), p.Const(c.names.pipelines[pl.name], 8)),),
                              next=_state_name(pl.parser, "start"), comment=f"pipeline {pl.name}, {_src(pl.span)}"))
    cases.append(p.Case((p.Default(),), "nfc_no_pipeline"))
    start = p.State("start", arch.parser_start(), (arch.ingress_port(),), tuple(cases))
    states.insert(0, start)
    states += _bridge_states(c)
    for g in prog.parsers.values():
        states += [_pstate(c, g, st) for st in g.states]
    for reason in sorted(_parser_ends(prog, "drop")):
        states.append(p.State(f"nfc_drop_{reason}", (p.Assign(p.ref("meta.nfc_drop"),
                                                              p.ref(f"NFC_DROP_{reason.upper()}")),)))
    for reason in sorted(_parser_ends(prog, "punt")):
        states.append(p.State(f"nfc_punt_{reason}", (p.Assign(p.ref("meta.nfc_punt"),
                                                              p.ref(f"NFC_PUNT_{reason.upper()}")),)))
    states.append(p.State("nfc_packet_out", (p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref("hdr.nfc_packet_out"),))),
                                             p.Assign(p.ref("meta.nfc_cut"), p.Const(255, 8))),
                          comment="a packet-out from the control plane: no processing, straight to its port"))
    states.append(p.State("nfc_no_pipeline", (p.Assign(p.ref("meta.nfc_drop"), p.ref("NFC_DROP_NO_PIPELINE")),)))
    return p.Parser("IngressParser" if arch.name == "tna" else "NfcParser", arch.parser_params(),
                    tuple(c.parser_locals), tuple(states))


def _port_key(arch: Arch, port: int) -> p.Expr:
    return p.Const(port, arch.port_width, base=10)


def _bridge_states(c: _Ctx) -> list[p.State]:
    back = [b for b in c.bridges if b.direction is Direction.TO_SWITCH]
    cases = tuple(p.Case((p.Const(b.cut_id, 8, base=10),), f"nfc_bridge{b.cut_id}") for b in back)
    look = p.Call(p.ref("pkt.lookahead"), type_args=(p.Bits(8),))
    bad = p.Assign(p.ref("meta.nfc_drop"), p.ref("NFC_DROP_BAD_BRIDGE"))
    out = [p.State("nfc_from_server", (bad,), (look,), (*cases, p.Case((p.Default(),), "nfc_bad_bridge")),
                   comment="packets back from a server start with a bridge header; its first byte is the cut id "
                           "(bad_bridge stands until the whole bridge header has been read)")]
    for b in back:
        name = f"nfc_bridge{b.cut_id}"
        # the pipeline and the stage to resume at are set here, not in the ingress control: the
        # pipelines' tests then read nothing a table writes (on Tofino they can start in the
        # first stage)
        pl = next(x for x in c.prog.pipelines if x.name == b.pipeline)
        resume = pl.stages.index(b.before_stage) if b.before_stage else len(pl.stages)
        body = (p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref(f"hdr.{name}"),))),
                p.Assign(p.ref("meta.nfc_drop"), p.Const(0, 8)),
                p.Assign(p.ref("meta.nfc_cut"), p.Const(b.cut_id, 8)),
                p.Assign(p.ref("meta.nfc_pipeline"), p.Const(c.names.pipelines[pl.name], 8)),
                p.Assign(p.ref("meta.nfc_resume"), p.Const(resume, 8)))
        comment = f"bridge #{b.cut_id}: re-parse from the validity bits"
        if b.required:  # valid on every path to the cut: a clear bit is a forged or corrupt bridge
            comment += f"; {', '.join(b.required)} must be valid here, a bridge saying otherwise is bad"
            keys = tuple(p.ref(f"hdr.{name}.v_{inst}") for inst in b.required)
            cases = (p.Case(tuple(p.Const(1, 1) for _ in keys), f"{name}_v0"), p.Case((p.Default(),), "nfc_bad_bridge"))
            out.append(p.State(name, body, keys, cases, comment=comment))
        else:
            out.append(p.State(name, body, next=f"{name}_v0", comment=comment))
        for i, inst in enumerate(b.valid_bits):
            nxt = f"{name}_v{i + 1}"
            if inst in b.required:  # its bit was checked above
                out.append(p.State(f"{name}_v{i}", (), next=f"{name}_x{i}"))
            else:
                out.append(p.State(f"{name}_v{i}", (), (p.ref(f"hdr.{name}.v_{inst}"),),
                                   (p.Case((p.Const(1, 1),), f"{name}_x{i}"), p.Case((p.Default(),), nxt))))
            out.append(p.State(f"{name}_x{i}", (p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref(f"hdr.{inst}"),))),),
                               next=nxt))
        out.append(p.State(f"{name}_v{len(b.valid_bits)}", (), next="accept"))
    out.append(p.State("nfc_bad_bridge", (p.Assign(p.ref("meta.nfc_drop"), p.ref("NFC_DROP_BAD_BRIDGE")),)))
    return out


def _pstate(c: _Ctx, g: ir.ParserGraph, st: ir.ParserState) -> p.State:
    body: list[p.Stmt] = []
    last_extracted = ""
    for s in st.stmts:
        if isinstance(s, ir.Extract):
            body.append(p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref(f"hdr.{s.inst}"),))))
            last_extracted = s.inst
            if s.inst in _checksummed(c) and not c.arch.needs_ingress_checksum:
                locals_, stmts = c.arch.parser_checksum(s.inst, c.meta(f"nfc_csum_ok_{s.inst}", p.Bool()))
                c.parser_locals += [x for x in locals_ if x not in c.parser_locals]
                body += stmts
        elif isinstance(s, ir.Verify):
            c.verifies.append((g.name, last_extracted, s))
        else:
            raise Unsupported("statements other than extract and verify in parser states", s.span)
    name = _state_name(g.name, st.name)
    comment = f"{g.name}.{st.name}, {_src(st.span)}"
    if not st.select:
        return p.State(name, tuple(body), next=_target(g, st.default), comment=comment)
    cases = [p.Case(tuple(_keyset(v, m, e.width) for (v, m), e in zip(case.values, st.select, strict=True)),
                    _target(g, case.target)) for case in st.cases]
    cases.append(p.Case((p.Default(),), _target(g, st.default)))
    select = tuple(_expr(c, e) for e in st.select)
    return p.State(name, tuple(body), select, tuple(cases), comment=comment)


def _checksummed(c: _Ctx) -> set[str]:
    if not c.csum_checked:
        for g in c.prog.parsers.values():
            for st in g.states:
                for s in st.stmts:
                    if isinstance(s, ir.Verify):
                        c.csum_checked |= {x.inst for x in walk_expr(s.cond) if isinstance(x, ir.ChecksumOk)}
    return c.csum_checked


def _keyset(value: int, mask: int, width: int) -> p.Expr:
    if mask == (1 << width) - 1:
        return p.Const(value, width)
    return p.Mask(p.Const(value, width), p.Const(mask, width))


def _target(g: ir.ParserGraph, t: ir.PTarget) -> str:
    if t.kind == "accept":
        return "accept"
    if t.kind == "drop":
        return f"nfc_drop_{t.name}"
    if t.kind == "punt":
        return f"nfc_punt_{t.name}"
    return _state_name(g.name, t.name)


def _state_name(parser: str, state: str) -> str:
    """``<parser>__<state>``: a double underscore, which no .nfp name contains (check-names),
    so parser ``a`` state ``b_c`` and parser ``a_b`` state ``c`` stay apart."""
    return f"{parser}__{state}"


# ---- ingress ---------------------------------------------------------------------------------

def _ingress(c: _Ctx) -> p.Control:
    c.locals.append(c.arch.counter_instance("nfc_drops", 256))
    c.locals.append(p.Action("nfc_miss", (), (), "the default action of every table: a miss"))
    front: list[p.Stmt] = [p.Comment("what the reference semantics does while parsing, in the same order")]
    from_port = p.Bin("==", p.ref("meta.nfc_cut"), p.Const(0, 8))
    folds = _checksum_flags(c)  # (v1model) only the checks of a packet from a port read them
    if folds:
        front.append(p.If(from_port, tuple(folds)))
    # the first check that fails names the drop: one if-else chain, so p4c's Tofino back end
    # knows the drops exclusive and places them in one stage (separate ifs, each with a drop
    # and an ``exit``, it ordered one after another: three stages before the first lookup)
    # each parser's checks in its order; a check several parsers make alike (the same header,
    # condition and reason) is made once for all of them, at a place that keeps every parser's
    # order (a shortest common supersequence): fewer tests in the chain
    merged: list[tuple[tuple[str, p.Expr, str], set[int]]] = []
    for parser in dict.fromkeys(x[0] for x in c.verifies):
        users = {c.names.pipelines[pl.name] for pl in c.prog.pipelines if pl.parser == parser}
        if not users:  # a parser no pipeline uses (W001) parses no packet
            continue
        mine = [(inst, p.Un("!", _expr(c, v.cond)), v.reason) for q, inst, v in c.verifies if q == parser]
        merged = _supersequence(merged, [(x, users) for x in mine])
    checks: list[tuple[p.Expr, str]] = []
    for (inst, failed, reason), users in merged:
        cond = failed if not inst else p.Bin("&&", p.Call(p.ref(f"hdr.{inst}.isValid")), failed)
        if len(users) < len(c.prog.pipelines):  # only packets these parsers parsed
            codes = sorted(users)
            which: p.Expr = p.Bin("==", p.ref("meta.nfc_pipeline"), p.Const(codes[0], 8))
            for k in codes[1:]:
                which = p.Bin("||", which, p.Bin("==", p.ref("meta.nfc_pipeline"), p.Const(k, 8)))
            cond = p.Bin("&&", which, cond)
        checks.append((cond, reason))
    parsed = p.Bin("!=", p.ref("meta.nfc_drop"), p.Const(0, 8))  # the parser chose a drop
    packet_out = (*_forward(c, p.ref("hdr.nfc_packet_out.egress_port")),
                  p.CallStmt(p.Call(p.ref("hdr.nfc_packet_out.setInvalid"))), p.Exit())
    # a packet-out, a packet from a port and one back from a server in one chain too: the
    # drop and truncation tests are the same arms for both kinds of packet
    front += _chain([(p.Bin("==", p.ref("meta.nfc_cut"), p.Const(255, 8)), packet_out),
                     *((p.Bin("&&", from_port, cond), _drop(c, reason)) for cond, reason in checks),
                     (parsed, _drop_code(c)),
                     # (a punt only where a parser punts: its packet_in header takes an action of its own)
                     *([(p.Bin("&&", from_port, p.Bin("!=", p.ref("meta.nfc_punt"), p.Const(0, 8))),
                         _punt(c, p.ref("meta.nfc_punt")))] if _parser_ends(c.prog, "punt") else []),
                     (c.arch.parser_error(), _drop(c, "truncated")),
                     *(_from_server(c, b) for b in c.bridges if b.direction is Direction.TO_SWITCH)])
    # one if-else chain: the Tofino back end then knows the pipelines' tables exclusive and
    # places them side by side (as separate ifs it ran them one after another: the DSR
    # router took 20 stages, 18 as a chain)
    blocks = [(c.names.pipelines[pl.name], tuple(_pipeline(c, pl))) for pl in c.prog.pipelines]
    pipelines: tuple[p.Stmt, ...] = ()
    for code, body in reversed(blocks):
        pipelines = (p.If(p.Bin("==", p.ref("meta.nfc_pipeline"), p.Const(code, 8)), body, pipelines),)
    apply = (*front, *pipelines,
             p.If(p.Bin("==", p.ref("meta.nfc_forwarded"), p.Const(0, 1)), _drop(c, "no_egress"), ()))
    return p.Control("Ingress" if c.arch.name == "tna" else "NfcIngress", c.arch.ingress_params(),
                     tuple(c.locals), apply)


_Check = tuple[tuple[str, p.Expr, str], set[int]]  # (header, failed condition, reason), pipelines


def _supersequence(a: list[_Check], b: list[_Check]) -> list[_Check]:
    """A shortest sequence holding ``a`` and ``b`` each in its order, an item of both once
    (for the union of their pipelines)."""
    n, m = len(a), len(b)
    lcs = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if a[i][0] == b[j][0] else max(lcs[i + 1][j], lcs[i][j + 1])
    out: list[_Check] = []
    i = j = 0
    while i < n and j < m:
        if a[i][0] == b[j][0]:
            out.append((a[i][0], a[i][1] | b[j][1]))
            i, j = i + 1, j + 1
        elif lcs[i + 1][j] >= lcs[i][j + 1]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]


def _chain(arms: list[tuple[p.Expr, tuple[p.Stmt, ...]]]) -> list[p.Stmt]:
    """``if (a) {..} else if (b) {..} ...``: the first arm whose condition holds."""
    out: tuple[p.Stmt, ...] = ()
    for cond, body in reversed(arms):
        out = (p.If(cond, body, out),)
    return list(out)


def _checksum_flags(c: _Ctx) -> list[p.Stmt]:
    if not c.arch.needs_ingress_checksum:
        return []
    out: list[p.Stmt] = []
    for inst in sorted(_checksummed(c)):
        out += _csum_flag(c, inst)
    return out


def _csum_flag(c: _Ctx, inst: str) -> list[p.Stmt]:
    """RFC 1071 over the whole header: fold the 16-bit words' sum and compare with 0xffff."""
    h = c.prog.header_of(inst)
    whole: p.Expr = p.ref(f"hdr.{inst}.{h.fields[0].name}")
    for f in h.fields[1:]:
        whole = p.Bin("++", whole, p.ref(f"hdr.{inst}.{f.name}"))
    words = [p.Cast(p.Bits(32), p.Slice(whole, h.bits - 1 - 16 * i, h.bits - 16 - 16 * i)) for i in range(h.bits // 16)]
    total: p.Expr = words[0]
    for w in words[1:]:
        total = p.Bin("+", total, w)
    s = c.meta(f"nfc_csum_sum_{inst}", p.Bits(32))
    c.locals.append(p.Action(f"nfc_fold_{inst}", (), (
        p.Assign(s, total),
        p.Assign(s, p.Bin("+", p.Cast(p.Bits(32), p.Slice(s, 15, 0)), p.Bin(">>", s, p.Const(16, -1, base=10)))),
        p.Assign(s, p.Bin("+", p.Cast(p.Bits(32), p.Slice(s, 15, 0)), p.Bin(">>", s, p.Const(16, -1, base=10))))),
        f"one's complement sum of header {inst}"))
    flag = c.meta(f"nfc_csum_ok_{inst}", p.Bool())
    # only a valid header is folded (its fields are undefined otherwise); the flag stays false
    return [p.If(p.Call(p.ref(f"hdr.{inst}.isValid")), (
        p.CallStmt(p.Call(p.ref(f"nfc_fold_{inst}"))),
        p.Assign(flag, p.Bin("==", p.Slice(s, 15, 0), p.Const(0xFFFF, 16)))))]


def _pipeline(c: _Ctx, pl: ir.Pipeline) -> list[p.Stmt]:
    """Every switch stage of ``pl`` once, in order, guarded by the resume point.

    A packet from a front-panel port starts at stage 0 (``meta.nfc_resume`` is 0); one back
    from a server resumes at the stage after the cut it left at.  Emitting each stage once
    and selecting by ``nfc_resume`` keeps one apply site per table (bmv2 and Tofino accept
    a table applied at one place per control only)."""
    out: list[p.Stmt] = []
    main = find_bridge(c.bridges, pl.name, Direction.TO_SERVER)
    for i, s in enumerate(pl.stages):
        at = p.Bin("<=", p.ref("meta.nfc_resume"), p.Const(i, 8))
        if main is not None and s == main.before_stage:
            out.append(p.If(at, (*_to_server(c, main), p.Exit())))
        if c.placement.segment[s] is not Segment.SERVER:
            out.append(p.If(at, tuple(_stage(c, c.prog.stages[s]))))
    return out


def _from_server(c: _Ctx, b: Bridge) -> tuple[p.Expr, tuple[p.Stmt, ...]]:
    """Restore what bridge ``b`` carried back from the server (the parser set the resume
    point): the condition (this bridge's cut) and the statements."""
    body: list[p.Stmt] = [p.Comment(f"back from the server at bridge #{b.cut_id} ({b.path})")]
    for f in b.fields:
        src = p.ref(f"hdr.nfc_bridge{b.cut_id}.{_bridge_field(f.name)}")
        if f.name == EGRESS:  # chosen before the cut: forward there again (it is the same switch pass)
            chosen = p.Bin("==", p.ref(f"hdr.nfc_bridge{b.cut_id}.{_bridge_field(EGRESS_SET)}"), p.Const(1, 1))
            body.append(p.If(chosen, tuple(_forward(c, src))))
        elif f.name == EGRESS_SET:
            continue
        else:
            body.append(p.Assign(_bridge_target(c, f.name), src))
    body.append(p.CallStmt(p.Call(p.ref(f"hdr.nfc_bridge{b.cut_id}.setInvalid"))))
    return p.Bin("==", p.ref("meta.nfc_cut"), p.Const(b.cut_id, 8)), tuple(body)


def _bridge_target(c: _Ctx, name: str) -> p.Expr:
    kind, _, field_ = name.partition(".")
    if kind == "meta":
        return p.ref(f"meta.{field_}")
    return c.meta(f"nfc_std_{field_}", p.Bits(16))


def _to_server(c: _Ctx, b: Bridge) -> list[p.Stmt]:
    h = f"hdr.nfc_bridge{b.cut_id}"
    out: list[p.Stmt] = [p.Comment(f"to the server: bridge #{b.cut_id}"),
                         p.CallStmt(p.Call(p.ref(f"{h}.setValid"))),
                         p.Assign(p.ref(f"{h}.cut_id"), p.Const(b.cut_id, 8))]
    out += _validity_flags(c, b)
    for f in b.fields:
        if f.name in (EGRESS, EGRESS_SET):
            chosen = c.meta("nfc_egress", p.Bits(16)) if f.name == EGRESS else p.ref("meta.nfc_forwarded")
            out.append(p.Assign(p.ref(f"{h}.{_bridge_field(f.name)}"), chosen))
            continue
        kind, _, name = f.name.partition(".")
        src = p.ref(f"meta.{name}") if kind == "meta" else c.arch.std_field(name)
        if src is None:
            raise Unsupported(f"std.{name} on {c.arch.name}", Span(c.prog.file, 1, 1, 1, 1))
        out.append(p.Assign(p.ref(f"{h}.{_bridge_field(f.name)}"), src))
    return out + _to_server_port(c, b)


# at most this many headers of a bridge of unknown validity get one test tree (2^n leaves)
FLAG_TREE_MAX = 3


def _validity_flags(c: _Ctx, b: Bridge) -> list[p.Stmt]:
    """Bridge ``b``'s validity flags, each written as a constant: a copy of the header's
    validity bit would be one more PHV source in the bridge's container (Tofino allows two per
    action) and makes p4c's Tofino back end alias a header field with a validity bit, which it
    cannot.  A header valid on every path here gets 1; the others are tested in one tree of
    ``if``s whose every leaf writes all the flags: one action per path, so the back end places
    them in one stage (a test per flag wrote the flags' shared container from three tables,
    which it placed in three stages one after another)."""
    h = f"hdr.nfc_bridge{b.cut_id}"
    known = tuple(i for i in b.valid_bits if i in b.required or (c.must is not None and i in c.must))
    unknown = tuple(i for i in b.valid_bits if i not in known)

    def leaf(chosen: dict[str, int]) -> tuple[p.Stmt, ...]:
        return tuple(p.Assign(p.ref(f"{h}.v_{i}"), p.Const(chosen.get(i, 1), 1)) for i in b.valid_bits)

    def tree(rest: tuple[str, ...], chosen: dict[str, int]) -> tuple[p.Stmt, ...]:
        if not rest:
            return leaf(chosen)
        valid = p.Call(p.ref(f"hdr.{rest[0]}.isValid"))
        return (p.If(valid, tree(rest[1:], {**chosen, rest[0]: 1}), tree(rest[1:], {**chosen, rest[0]: 0})),)

    if len(unknown) <= FLAG_TREE_MAX:
        return list(tree(unknown, {}))
    return [*(p.Assign(p.ref(f"{h}.v_{i}"), p.Const(1, 1)) for i in known),
            *(p.If(p.Call(p.ref(f"hdr.{i}.isValid")), (p.Assign(p.ref(f"{h}.v_{i}"), p.Const(1, 1)),),
                   (p.Assign(p.ref(f"{h}.v_{i}"), p.Const(0, 1)),)) for i in unknown)]


STEER_ACTION = "nfc_steer_to"


def _to_server_port(c: _Ctx, b: Bridge) -> list[p.Stmt]:
    """The server port: the first, or with ``shard by`` the one whose share of the selector's
    values holds this packet's (compiler/shard.py), by comparisons from the last share down;
    then the bridge's steering table, keyed by the selector's bucket and empty unless the
    runtime moved a bucket to another server port (a server added, removed or failed:
    runtime/steering.py), overrides it for that bucket."""
    shard = c.prog.deployment.shard if c.prog.deployment is not None else None
    ports = c.server_ports or (0,)
    if shard is None or len(ports) < 2:
        return _forward(c, p.Const(ports[0], 16))
    st = steering(shard, len(ports))
    saved, c.hoisted = c.hoisted, []
    value = _expr(c, st.selector)
    out: list[p.Stmt] = [p.Comment(f"shard by {shard.method}: {_src(shard.span)}"), *c.hoisted]
    selector = value
    if not isinstance(value, p.Member):  # an expression: computed once
        selector = c.meta("nfc_shard", p.Bits(st.selector.width))
        out.append(p.Assign(selector, value))
    c.hoisted = saved
    share = c.meta("nfc_bucket", p.Bits(8))  # the bucket: the selector's top bits
    bucket: p.Expr = p.Slice(selector, st.selector.width - 1, st.bucket_shift)
    out.append(p.Assign(share, bucket if st.bucket_bits == 8 else p.Cast(p.Bits(8), bucket)))

    def to(i: int) -> tuple[p.Stmt, ...]:
        return tuple(_forward(c, p.Const(ports[i], 16)))

    chain: tuple[p.Stmt, ...] = to(0)
    for i, bound in enumerate(st.bounds[1:], start=1):
        chain = (p.If(p.Bin(">=", selector, p.Const(bound, st.selector.width)), to(i), chain),)
    if not any(isinstance(x, p.Action) and x.name == STEER_ACTION for x in c.locals):
        c.locals.append(p.Action(STEER_ACTION, (("v_port", p.Bits(16)),), tuple(_forward(c, p.ref("v_port"))),
                                 f"a bucket moved to another server port (Runtime.steer), {_src(shard.span)}"))
    name = f"nfc_steer{b.cut_id}"
    buckets = 1 << st.bucket_bits
    c.locals.append(p.Table(name, (p.Key(share, "exact", "bucket"),), (STEER_ACTION, "nfc_miss"), "nfc_miss",
                            buckets, f"steering of bridge #{b.cut_id}: bucket -> server port when moved, "
                                     f"{_src(shard.span)}"))
    c.names.tables[name] = {"p4_table": name, "p4_action": STEER_ACTION, "size": buckets, "keys": ["bucket"],
                            "values": ["port"], "steering": True}
    # chosen where the packet leaves: computed at the stage's start instead (beside the
    # lookup whose miss sends it), the Tofino back end still placed the lookup after the
    # choice, as it orders every table with an ``exit`` after the tables before it (the DSR
    # router went from 17 stages to 18)
    return [*out, *chain, p.CallStmt(p.Call(p.ref(f"{name}.apply")))]


# ---- stages and statements -------------------------------------------------------------------

def _stage(c: _Ctx, st: ir.Stage) -> list[p.Stmt]:
    c.accesses = {}
    for reg in accessed_registers(st.body):
        r = c.prog.registers[reg]
        other = c.reg_stage.setdefault(reg, st.name)
        if other != st.name:
            raise Unsupported(f"register '{reg}' accessed by stages '{other}' and '{st.name}' on the switch (a packet "
                              "passes a register's stateful ALU once): access it in one stage", st.span)
        if r.width > 32:
            raise Unsupported(f"the {r.width}-bit register '{reg}' on the switch (a stateful ALU word is 32 bits)",
                              r.span)
        found = one_access(c.prog, st.body, reg)
        if isinstance(found, NotOne):
            raise Unsupported(found.reason + " on the switch", found.span)
        c.accesses[reg] = found
    c.early, c.prelude, c.stage_must = _early_hashes(c.prog, st.body), [], c.must_at[st.name]
    for d in c.deferred.values():
        d.pos = 0
    body = _block(c, st.body, c.stage_must)
    prelude, c.early, c.prelude = c.prelude, frozenset(), []
    return [p.Comment(f"stage {st.name}, {_src(st.span)}"), *prelude, *body]


def _csum_chain_step(s: ir.Stmt) -> tuple[tuple[str, str], ir.CsumUpdate] | None:
    """``(checksum field, update)`` when ``s`` is ``h.c = csum_update(h.c, old, new)`` with
    ``old`` and ``new`` not reading ``h.c``."""
    if not (isinstance(s, ir.Assign) and isinstance(s.target, ir.HeaderField) and isinstance(s.value, ir.CsumUpdate)):
        return None
    loc = ("hdr", s.target.inst, s.target.field)
    e = s.value
    if loc_of(e.csum) != loc or loc in expr_reads(e.old) | expr_reads(e.new):
        return None
    return (s.target.inst, s.target.field), e


def _zero_fix(s: ir.Stmt) -> tuple[str, str] | None:
    """The checksum field ``s`` sends as all ones when it is zero: ``if (c == 0) { c = 0xffff; }``."""
    if not (isinstance(s, ir.If) and not s.orelse and len(s.then) == 1 and isinstance(s.cond, ir.Binary)
            and s.cond.op == "==" and isinstance(s.cond.left, ir.HeaderField) and isinstance(s.cond.right, ir.Const)
            and s.cond.right.value == 0):
        return None
    f = s.cond.left
    fix = s.then[0]
    if isinstance(fix, ir.Assign) and loc_of(fix.target) == ("hdr", f.inst, f.field) \
            and isinstance(fix.value, ir.Const) and fix.value.value == 0xFFFF:
        return f.inst, f.field
    return None


def _deferred_checksums(prog: ir.Program, placement: Placement) -> dict[tuple[str, str], _Deferred]:
    """The checksum fields whose ``csum_update`` chains the deparser can compute: on every
    pipeline the switch stages update the field in at most one stage, in one block (so every
    packet that takes the chain's first update takes all of it), and nothing on the switch
    reads or writes the field, or changes its header's validity, after the first update but
    the chain and an RFC 768 zero fix right after it, the same on every chain."""
    chains: dict[tuple[str, str], list[list[int]]] = {}
    fixes: dict[tuple[str, str], list[bool]] = {}
    bad: set[tuple[str, str]] = set()

    def block(stmts: tuple[ir.Stmt, ...], started: set[tuple[str, str]], here: dict[tuple[str, str], int]) -> None:
        for s in stmts:
            step = _csum_chain_step(s)
            if step is not None:
                f, e = step
                if f in started and (f not in here or here[f] != id(stmts)):
                    bad.add(f)  # a second stage, or another block of this one
                if f not in started:
                    chains.setdefault(f, []).append([])
                    fixes.setdefault(f, []).append(False)
                    started.add(f)
                    here[f] = id(stmts)
                chains[f][-1].append(e.old.width)
                continue
            fix = _zero_fix(s)
            if fix is not None and here.get(fix) == id(stmts):
                fixes[fix][-1] = True
                continue
            reads = {r for e in stmt_exprs(s) for r in expr_reads(e)}
            writes = stmt_writes(prog, s)
            for f in started:
                inst, name = f
                if {("hdr", inst, name), ("hdrall", inst)} & (reads | writes) or ("valid", inst) in writes:
                    bad.add(f)
            if isinstance(s, ir.If):
                block(s.then, started, here)
                block(s.orelse, started, here)
            elif isinstance(s, ir.Lookup):
                block(s.hit, started, here)
                block(s.miss, started, here)

    for pl in prog.pipelines:
        started: set[tuple[str, str]] = set()
        for name in pl.stages:
            if placement.segment[name] is not Segment.SERVER:
                block(prog.stages[name].body, started, {})
    out = {}
    for f, lists in chains.items():
        if f in bad or len(set(fixes[f])) > 1:
            continue
        widths = tuple(max(ws[i] for ws in lists if i < len(ws)) for i in range(max(map(len, lists))))
        out[f] = _Deferred(f"nfc_l4csum_{f[0]}", widths, fixes[f][0])
    return out


def _early_hashes(prog: ir.Program, body: tuple[ir.Stmt, ...]) -> frozenset[int]:
    """The hashes in stage ``body`` whose inputs nothing in the stage writes before them: the
    stage computes them first, each in a keyless table of its own.  On Tofino straight-line
    code is one action, and an action that hashes cannot take action data (p4c's Tofino back
    end: a keyless table's hash leaves no room for it), so the constants of an encapsulation
    (a 48-bit MAC) and writes of several validity bits, which need a bitmasked-set from action
    data, could not share the hash's action."""
    written: set[tuple[str, ...]] = set()
    early: set[int] = set()
    late: set[int] = set()
    for s in walk_stmts(body):
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, ir.Hash):
                    (late if changed_by(expr_reads(x), written) else early).add(id(x))
        written |= stmt_writes(prog, s)
    return frozenset(early - late)


def _register_accesses(c: _Ctx, s: ir.Stmt) -> list[p.Stmt]:
    """The read-modify-writes that run before statement ``s`` (``OneAccess.at``)."""
    out: list[p.Stmt] = []
    for a in c.accesses.values():
        if a.at is s:
            saved, c.hoisted = c.hoisted, []
            done = _register_access(c, a)
            out += [*c.hoisted, *done]
            c.hoisted = saved
    return out


def _register_access(c: _Ctx, a: OneAccess) -> tuple[p.Stmt, ...]:
    r = c.prog.registers[a.reg]
    if not any(isinstance(x, p.Instance) and x.name == a.reg for x in c.locals):
        inst = c.arch.register_instance(a.reg, r.width, r.size)
        c.locals.append(replace(inst, comment=f"register {a.reg}, {_src(r.span)}"))
    copy = c.meta(f"nfc_reg_{a.reg}", _bits(r.width))
    raw = _expr(c, a.index)
    index = raw if a.index.width == 32 else p.Cast(p.Bits(32), raw)

    def update(value: p.Expr) -> tuple[p.Expr | None, p.Expr | None]:
        c.reg_value[a.reg] = value
        guard = None if a.guard is None else _expr(c, a.guard)
        new = None if a.new is None else _expr(c, a.new)
        return guard, new

    insts, stmts = c.arch.register_access(a.reg, r.width, index, copy, update)
    c.reg_value[a.reg] = copy  # reads after the access: the copy, which the write statement updates too
    src = f"{_src(a.write.span)}" if a.write is not None else _src(a.at.span)
    c.locals += [replace(i, comment=f"the one read-modify-write of register {a.reg} per packet, {src}") for i in insts]
    # the reference reads 0 outside the register and writes nothing there
    # (compared at the index's own width: a wider index is not cut to 32 bits first)
    inside = p.Bin("<", raw, p.Const(r.size, a.index.width, base=10)) if 1 << a.index.width > r.size else None
    c.reg_in_range[a.reg] = inside
    return stmts if inside is None else (p.Assign(copy, p.Const(0, r.width)), p.If(inside, stmts))


def _block(c: _Ctx, stmts: tuple[ir.Stmt, ...], must: frozenset[str]) -> tuple[p.Stmt, ...]:
    """``stmts`` lowered, where the headers ``must`` are valid on entry (a packet coming back
    from a server resumes with them too: the bridge requires their validity bits)."""
    out: list[p.Stmt] = []
    outer_must = c.must
    for s in stmts:
        outer, c.hoisted, c.must = c.hoisted, [], must
        out += _register_accesses(c, s)
        lowered = _stmt(c, s)  # nested blocks save and restore ``hoisted`` and ``must`` the same way
        out += [*c.hoisted, *lowered]
        c.hoisted = outer
        after = must_step(s, must, packet_order(c.prog))
        if after is None:  # no path goes on: what follows is unreachable
            break
        must = after
    c.must = outer_must
    return tuple(out)


def _branches(c: _Ctx, s: ir.If | ir.Lookup) -> tuple[tuple[p.Stmt, ...], tuple[p.Stmt, ...]]:
    assert c.must is not None, "statements are lowered in stages"
    (a, ma), (b, mb) = must_branches(s, c.must, packet_order(c.prog))
    return _block(c, a, ma), _block(c, b, mb)


def _stmt(c: _Ctx, s: ir.Stmt) -> list[p.Stmt]:
    match s:
        case ir.Assign() if isinstance(s.target, ir.RegRead):  # the ALU wrote the cell: keep the copy in step
            step = p.Assign(_register_value(c, s.target), _expr(c, s.value))
            inside = c.reg_in_range.get(s.target.reg)
            return [step if inside is None else p.If(inside, (step,))]
        case ir.Assign() if (chain := _csum_chain_step(s)) is not None and chain[0] in c.deferred:
            return _deferred_update(c, c.deferred[chain[0]], chain[1])
        case ir.If() if (fix := _zero_fix(s)) is not None and fix in c.deferred:
            return [p.Comment(f"{fix[0]}.{fix[1]}: a zero sum is sent as all ones by the deparser, {_src(s.span)}")]
        case ir.Assign():
            return [p.Assign(_lvalue(c, s.target), _expr(c, s.value))]
        case ir.If():
            return [p.If(_expr(c, s.cond), *_branches(c, s))]
        case ir.Lookup():
            return _lookup(c, s)
        case ir.Push():
            return _push(c, s)
        case ir.Pop():
            return [p.CallStmt(p.Call(p.ref(f"hdr.{s.inst}.setInvalid")))]
        case ir.Forward():
            return _forward(c, _expr(c, s.port))
        case ir.Drop():
            return list(_drop(c, s.reason))
        case ir.Verify():
            return [p.If(p.Un("!", _expr(c, s.cond)), _drop(c, s.reason), ())]
        case ir.Punt():
            return list(_punt(c, p.ref(f"NFC_PUNT_{s.reason.upper()}")))
        case ir.Eval() if isinstance(s.expr, ir.CounterOp) and s.expr.method == "count":
            return [c.arch.count(_counter(c, s.expr.obj), _expr(c, s.expr.index))]
        case ir.Refresh() if c.prog.tables[s.state].hints.cache:
            return []  # the switch cache's idle timeout is its timer (docs/switch.md, structure)
        case ir.Insert() | ir.Remove() | ir.Refresh() | ir.Eval() | ir.Extract():
            raise Unsupported(f"'{type(s).__name__.lower()}' on the switch", s.span)
        case _:
            assert_never(s)


def _forward(c: _Ctx, port: p.Expr) -> list[p.Stmt]:
    egress = c.meta("nfc_egress", p.Bits(16))
    # the port's own field, not the copy this action writes: a Tofino action reads the fields
    # as they were before it
    source = port if isinstance(port, p.Member | p.Path) else egress
    return [p.Assign(egress, port), *c.arch.forward(source), p.Assign(p.ref("meta.nfc_forwarded"), p.Const(1, 1))]


def _punt(c: _Ctx, code: p.Expr) -> tuple[p.Stmt, ...]:
    """To the control plane: a packet_in header (reason, ingress port) on the CPU port."""
    return (p.CallStmt(p.Call(p.ref("hdr.nfc_packet_in.setValid"))),
            p.Assign(p.ref("hdr.nfc_packet_in.reason"), code),
            p.Assign(p.ref("hdr.nfc_packet_in.ingress_port"), c.arch.std_field("ingress_port") or p.Const(0, 16)),
            *c.arch.forward(p.ref("NFC_CPU_PORT")), p.Exit())


DROP_CODE = p.ref("meta.nfc_drop")


def _drop(c: _Ctx, reason: str) -> tuple[p.Stmt, ...]:
    code = p.ref(f"NFC_DROP_{reason.upper()}")
    return (p.Assign(p.ref("meta.nfc_drop"), code), *_drop_code(c, code))


def _drop_code(c: _Ctx, code: p.Expr = DROP_CODE) -> tuple[p.Stmt, ...]:
    """Drop, counted under ``code`` (a known reason: its constant, so the counter's index is
    not the field the same action writes, which Tofino would read in a later stage)."""
    return (*c.arch.drop(), c.arch.count("nfc_drops", code), p.Exit())


def _push(c: _Ctx, s: ir.Push) -> list[p.Stmt]:
    h = c.prog.header_of(s.inst)
    given = dict(s.inits)
    out: list[p.Stmt] = [p.CallStmt(p.Call(p.ref(f"hdr.{s.inst}.setValid")))]
    for f in h.fields:
        value = _expr(c, given[f.name]) if f.name in given else p.Const(0, f.width)
        out.append(p.Assign(p.ref(f"hdr.{s.inst}.{f.name}"), value))
    return out


def _lookup(c: _Ctx, s: ir.Lookup) -> list[p.Stmt]:
    t = c.prog.tables[s.table]
    if t.is_state and not t.hints.cache:
        raise Unsupported(f"data-plane state '{t.name}' on the switch", s.span)
    if t.name in c.names.tables:
        raise Unsupported(f"a second lookup of table '{t.name}' on the switch (a P4 table is applied at one "
                          "place; look it up once and keep the result in metadata)", s.span)
    size = c.placement.cache_entries.get(t.name, t.size)
    if t.hints.cache and size == 0:  # no room was left for an entry (P4 has no table of size 0): all miss
        return [p.Comment(f"lookup {t.name}, {_src(s.span)}: its switch cache has no entry, every packet goes to "
                          "the server"), *_to_server_miss(c, s)]
    params = tuple((f"v_{v.name}", _bits(v.width)) for v in t.values)
    results: dict[p.Expr, p.Expr] = {p.ref(f"meta.{t.name}__{v.name}"): p.Path(f"v_{v.name}") for v in t.values}
    assert c.must is not None, "statements are lowered in stages"
    (hit, on_hit), (miss, on_miss) = must_branches(s, c.must, packet_order(c.prog))
    moved, on_hit_rest = _into_action(_block(c, hit, on_hit), results)
    kept = {r for r in p.exprs_of(on_hit_rest) if r in results}
    body = (*(p.Assign(c.meta(f"{t.name}__{v.name}", _bits(v.width)), p.ref(f"v_{v.name}")) for v in t.values
              if p.ref(f"meta.{t.name}__{v.name}") in kept), *moved)
    action = p.Action(f"{t.name}__hit", params, body, f"entry of table {t.name}, {_src(t.span)}")
    # beside a range field the priority decides and the prefix is a mask (docs/language.md): a
    # ternary match, which p4c's Tofino back end takes where it refuses lpm beside range
    ranked = any(k.match == "range" for k in t.keys)
    keys = tuple(p.Key(_expr(c, k.expr), "ternary", k.name, prefix=True) if ranked and k.match == "lpm" else
                 p.Key(_expr(c, k.expr), k.match, k.name) for k in t.keys)
    # a cache keeps each entry's idle time: the runtime evicts what the traffic no longer hits
    table = p.Table(t.name, keys, (action.name, "nfc_miss"), "nfc_miss", size,
                    f"table {t.name}, {_src(t.span)}" + (" (switch cache of the server's full table)" if t.hints.cache
                                                         else ""), idle=c.arch.idle_property if t.hints.cache else "")
    c.locals += [action, table]
    c.names.tables[t.name] = {"p4_table": table.name, "p4_action": action.name, "size": size,
                              "keys": [k.name for k in t.keys], "values": [v.name for v in t.values]}
    apply = p.Member(p.Call(p.ref(f"{t.name}.apply")), "hit")
    lowered = _to_server_miss(c, s) if t.hints.cache else _block(c, miss, on_miss)
    return [p.If(apply, on_hit_rest, lowered)]


def _into_action(hit: tuple[p.Stmt, ...],
                 results: dict[p.Expr, p.Expr]) -> tuple[tuple[p.Stmt, ...], tuple[p.Stmt, ...]]:
    """The leading assignments of a lookup's hit branch that its action can make itself, with
    the entry's values (``results``: ``meta.<table>__<value>`` → the action's parameter) read
    straight from the parameters, and the rest of the branch.

    A Tofino action is one stage's VLIW instruction: copying the results into their fields in
    an action of their own after the lookup costs a stage per lookup (the real back end placed
    Bluebird in 23 stages).  Moved: assignments whose value calls nothing and reads no field an
    earlier moved assignment wrote (unless that one wrote a parameter or a constant, which is
    then read in its place), each field written once; and ``setValid`` / ``setInvalid``, which
    no moved assignment reads (a validity test is a call)."""
    moved: list[p.Stmt] = []
    known = dict(results)  # what a read of a field means inside the action
    written: set[p.Expr] = set()
    for i, st in enumerate(hit):
        if isinstance(st, p.Comment) or _validity_write(st):
            moved.append(st)
            continue
        if not isinstance(st, p.Assign):
            return tuple(moved), hit[i:]
        whole = st.target.base if isinstance(st.target, p.Slice) else st.target
        reads = set(p.subexprs(st.value)) | ({whole} if isinstance(st.target, p.Slice) else set())
        if (whole in written or any(isinstance(r, p.Call) for r in reads)
                or any(r in written and r not in known for r in reads)):
            return tuple(moved), hit[i:]
        value = p.substitute(st.value, known)
        moved.append(p.Assign(st.target, value))
        written |= {st.target, whole}
        if isinstance(value, p.Path | p.Const) and not isinstance(st.target, p.Slice):
            known[whole] = value
        else:
            known.pop(whole, None)
    return tuple(moved), ()


def _to_server_miss(c: _Ctx, s: ir.Lookup) -> tuple[p.Stmt, ...]:
    b = next((b for b in c.bridges if b.miss == s.table and b.direction is Direction.TO_SERVER), None)
    if b is None:
        raise Unsupported(f"cached table '{s.table}' without a miss-path bridge", s.span)
    return (*_to_server(c, b), p.Exit())


def _validity_write(st: p.Stmt) -> bool:
    return (isinstance(st, p.CallStmt) and isinstance(st.call.target, p.Member) and not st.call.args
            and st.call.target.field in ("setValid", "setInvalid"))


def _lvalue(c: _Ctx, e: ir.LValue) -> p.Expr:
    match e:
        case ir.HeaderField():
            return p.ref(f"hdr.{e.inst}.{e.field}")
        case ir.MetaField():
            return p.ref(f"meta.{e.name}")
        case ir.Local():
            return c.meta(f"nfc_local_{e.name}", _bits(e.width))
        case ir.RegRead():
            return _register_value(c, e)
        case _:
            assert_never(e)


def _register_value(c: _Ctx, e: ir.RegRead) -> p.Expr:
    value = c.reg_value.get(e.reg)
    if value is None or e.reg not in c.accesses:  # outside a stage: a parser's verify, say
        raise Unsupported(f"register '{e.reg}' read outside the stage that accesses it", e.span)
    return value


def _read(c: _Ctx, e: ir.HeaderField) -> p.Expr:
    """A header field as the reference semantics reads it: 0 when the header is invalid.
    P4 leaves that value unspecified (P4_16 §8.25), so where the header is not valid on
    every path, the read goes through a metadata copy zeroed unless ``isValid()``."""
    if c.must is None or e.inst in c.must:
        return _lvalue(c, e)
    copy = c.meta(f"nfc_rd_{e.inst}__{e.field}", _bits(e.width))
    # one test, two exclusive writes: zeroing first and copying under a test are two writes of
    # the field in a row, which the Tofino back end places in two stages
    c.hoisted.append(p.If(p.Call(p.ref(f"hdr.{e.inst}.isValid")), (p.Assign(copy, _lvalue(c, e)),),
                          (p.Assign(copy, p.Const(0, e.width)),)))
    return copy


def _expr(c: _Ctx, e: ir.Expr) -> p.Expr:
    match e:
        case ir.Const():
            return p.Const(e.value, e.width)
        case ir.HeaderField():
            return _read(c, e)
        case ir.MetaField() | ir.Local():
            return _lvalue(c, e)
        case ir.StdField():
            std = c.arch.std_field(e.name)
            if std is None:
                raise Unsupported(f"std.{e.name} on {c.arch.name}", e.span)
            return std
        case ir.Result():
            return p.ref(f"meta.{e.table}__{e.field}")
        case ir.Valid():
            return p.Call(p.ref(f"hdr.{e.inst}.isValid"))
        case ir.ChecksumOk():
            return p.ref(f"meta.nfc_csum_ok_{e.inst}")
        case ir.Hash():
            return _hash(c, e)
        case ir.Unary():
            return p.Un(e.op, _expr(c, e.operand))
        case ir.Binary():
            return _deposit(c, e) or p.Bin(e.op, _expr(c, e.left), _expr(c, e.right))
        case ir.Slice():
            return p.Slice(_expr(c, e.base), e.hi, e.lo)
        case ir.Cast():
            inner = _expr(c, e.operand)
            if e.width == ir.BOOL:
                return p.Bin("!=", inner, p.Const(0, e.operand.width))
            if e.operand.width == ir.BOOL:
                return p.Cast(p.Bits(e.width), p.Cast(p.Bits(1), inner))
            return p.Cast(p.Bits(e.width), inner)
        case ir.CsumUpdate():
            return _csum_update(c, e)
        case ir.CounterOp() if e.method == "execute":
            c.hashes += 1
            colour = c.meta(f"nfc_colour{c.hashes}", p.Bits(8))
            c.hoisted += c.arch.meter_stmts(_counter(c, e.obj), _expr(c, e.index), colour)
            return p.Slice(colour, 1, 0)
        case ir.RegRead():
            return _register_value(c, e)
        case ir.HeaderRef() | ir.ExternCall() | ir.CounterOp():
            raise Unsupported(f"{type(e).__name__} expressions on the switch", e.span)
        case _:
            assert_never(e)


def _deposit(c: _Ctx, e: ir.Binary) -> p.Expr | None:
    """``C | (x & M)`` (either way round) with M one run of ones and C clear under it, as a
    concatenation of C's bits and x's: ``0xc000 | (h & 0x3fff)`` is ``2w3 ++ h[13:0]``.  The same
    value; but a Tofino action does one ALU operation per field per stage, and the back end
    refuses the AND and the OR in one action ("action spanning multiple stages"), while a
    concatenation of a constant and a slice is a single deposit-field.  None: not that shape."""
    if e.op != "|":
        return None
    for const, masked in ((e.left, e.right), (e.right, e.left)):
        if not (isinstance(const, ir.Const) and isinstance(masked, ir.Binary) and masked.op == "&"):
            continue
        for mask, x in ((masked.left, masked.right), (masked.right, masked.left)):
            if not isinstance(mask, ir.Const) or mask.value <= 0 or const.value & mask.value:
                continue
            lo = (mask.value & -mask.value).bit_length() - 1
            hi = mask.value.bit_length() - 1
            if mask.value != ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1) or hi >= e.width:
                continue  # not one run of ones within the width
            parts: list[p.Expr] = []
            if hi + 1 < e.width:
                parts.append(p.Const(const.value >> (hi + 1), e.width - hi - 1))
            parts.append(p.Slice(_expr(c, x), hi, lo))
            if lo:
                parts.append(p.Const(const.value & ((1 << lo) - 1), lo))
            out = parts[0]
            for part in parts[1:]:
                out = p.Bin("++", out, part)
            return out
    return None


def _csum_update(c: _Ctx, e: ir.CsumUpdate) -> p.Expr:
    """RFC 1624 eqn. 3 in 32-bit arithmetic: ~(~HC + ~m + m'), folded twice."""
    c.hashes += 1
    acc = c.meta(f"nfc_csum{c.hashes}", p.Bits(32))
    words: list[p.Expr] = [p.Cast(p.Bits(32), p.Un("~", _expr(c, e.csum)))]
    old, new = _expr(c, e.old), _expr(c, e.new)
    for hi in range(e.old.width - 1, 0, -16):
        words.append(p.Cast(p.Bits(32), p.Un("~", p.Slice(old, hi, hi - 15))))
        words.append(p.Cast(p.Bits(32), p.Slice(new, hi, hi - 15)))
    total: p.Expr = words[0]
    for w in words[1:]:
        total = p.Bin("+", total, w)
    fold = p.Bin("+", p.Cast(p.Bits(32), p.Slice(acc, 15, 0)), p.Bin(">>", acc, p.Const(16, -1, base=10)))
    c.hoisted += [p.Assign(acc, total), p.Assign(acc, fold), p.Assign(acc, fold)]
    return p.Un("~", p.Slice(acc, 15, 0))


def _deferred_update(c: _Ctx, d: _Deferred, e: ir.CsumUpdate) -> list[p.Stmt]:
    """One step of a chain the deparser computes: its words, one ALU operation each."""
    out: list[p.Stmt] = []
    if d.pos == 0:
        out += [p.Comment(f"the deparser updates the checksum (RFC 1624 eqn. 3): {_src(e.span)}"),
                p.Assign(c.meta(f"{d.name}_sum", p.Bits(16)), p.Un("~", _expr(c, e.csum))),
                p.Assign(c.meta(d.name, p.Bits(1)), p.Const(1, 1))]
    w, width = d.widths[d.pos], e.old.width
    for kind, value in (("old", p.Un("~", _expr(c, e.old))), ("new", _expr(c, e.new))):
        slot = c.meta(f"{d.name}_{kind}{d.pos}", p.Bits(w))  # zero above a narrower value
        out.append(p.Assign(slot if width == w else p.Slice(slot, width - 1, 0), value))
    d.pos += 1
    return out


def _deparser_checksums(c: _Ctx) -> tuple[tuple[str, p.Expr, tuple[p.Expr, ...], p.Expr, bool], ...]:
    """(engine, flag, words, target, zeros as ones) of each deferred checksum."""
    out = []
    for (inst, name), d in sorted(c.deferred.items()):
        words = (p.ref(f"meta.{d.name}_sum"),
                 *(p.ref(f"meta.{d.name}_{k}{i}") for i in range(len(d.widths)) for k in ("old", "new")))
        out.append((d.name, p.ref(f"meta.{d.name}"), words, p.ref(f"hdr.{inst}.{name}"), d.zeros_as_ones))
    return tuple(out)


def _counter(c: _Ctx, name: str) -> str:
    """Declare counter or meter ``name`` in the ingress once; its P4 name."""
    obj = c.prog.counters[name]
    if not any(isinstance(x, p.Instance) and x.name == name for x in c.locals):
        inst = (c.arch.user_counter_instance(name, obj.size) if obj.kind == "counter"
                else c.arch.meter_instance(name, obj.size))
        c.locals.append(p.Instance(inst.type, inst.args, inst.name, f"{obj.kind} {name}, {_src(obj.span)}"))
    return name


def _hash(c: _Ctx, e: ir.Hash) -> p.Expr:
    c.hashes += 1
    name = f"nfc_hash{c.hashes}"
    inst = c.arch.hash_instance(e.alg, e.width, name)
    if inst is not None:
        c.locals.append(inst)
    target = c.meta(name, p.Bits(e.width))
    if id(e) not in c.early:
        c.hoisted.append(c.arch.hash_stmt(e.alg, e.width, name, target, p.ListExpr(tuple(_expr(c, a) for a in e.args))))
        return target
    saved = c.hoisted, c.must
    c.hoisted, c.must = [], c.stage_must  # its inputs are lowered as the stage's start sees them
    args = p.ListExpr(tuple(_expr(c, a) for a in e.args))
    # in a table of its own: straight-line code after it would otherwise join its action
    why = f"hash at {_src(e.span)}, computed first in its stage"
    hidden = (p.Annotation("hidden"),)  # not the control plane's: p4c leaves it out of P4Info
    c.locals += [p.Action(f"{name}_compute", (), (c.arch.hash_stmt(e.alg, e.width, name, target, args),), why,
                          hidden),
                 p.Table(f"{name}_table", (), (f"{name}_compute",), f"{name}_compute", 1, why, annotations=hidden)]
    c.prelude += [*c.hoisted, p.CallStmt(p.Call(p.ref(f"{name}_table.apply")))]
    c.hoisted, c.must = saved
    return target


def _csum_updates(prog: ir.Program) -> tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...]:
    out = []
    for i in prog.instances:
        h = prog.headers[i.header]
        if h.checksum is None:
            continue
        fields = tuple(p.ref(f"hdr.{i.name}.{f.name}") for f in h.fields if f.name != h.checksum)
        out.append((i.name, fields, p.ref(f"hdr.{i.name}.{h.checksum}")))
    return tuple(out)
