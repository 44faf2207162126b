"""Facts about IR stages that placement needs: what they read and write, which
operations and match kinds they use, and how they split into MAU-sized units.

A *unit* is one top-level lookup (with its hit/miss actions) or a run of consecutive
top-level statements without lookups; on a switch each unit occupies one or more
consecutive MAU stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import assert_never

from compiler import ir
from lang.diagnostics import Span

__all__ = ["STD_CAPABILITY", "Unit", "Use", "changed_by", "expr_reads", "loc_of", "order_free", "parser_uses",
           "stage_units", "stage_uses", "stmt_writes", "walk_stmts"]

# A location: ("hdr", inst, field) | ("valid", inst) | ("meta", name) | ("std", name)
# | ("local", name) | ("result", table) | ("reg", name) | ("pkt",) for the packet body.
Loc = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Use:
    """One operation a stage needs from its target, where it is needed."""

    op: str
    span: Span
    what: str  # human-readable: "esp_encrypt", "lpm match on ipv4.dst", ...
    by_table: bool = False  # priced as a lookup of its table (the cost model), not one by one


@dataclass
class Unit:
    stage: str
    index: int
    tables: tuple[str, ...]
    stmts: tuple[ir.Stmt, ...]
    reads: set[Loc] = field(default_factory=set)
    writes: set[Loc] = field(default_factory=set)
    stateful: bool = False  # counters, meters, registers, state inserts
    may_stop: bool = False  # contains drop / punt / verify

    @property
    def name(self) -> str:
        return f"{self.stage}#{self.index}"


def loc_of(e: ir.Expr) -> Loc | None:
    match e:
        case ir.HeaderField():
            return ("hdr", e.inst, e.field)
        case ir.MetaField():
            return ("meta", e.name)
        case ir.StdField():
            return ("std", e.name)
        case ir.Local():
            return ("local", e.name)
        case ir.RegRead():
            return ("reg", e.reg)
        case _:
            return None


def children(e: ir.Expr) -> tuple[ir.Expr, ...]:
    match e:
        case ir.Const() | ir.HeaderField() | ir.MetaField() | ir.StdField() | ir.Local() | ir.Result() | ir.Valid() \
                | ir.ChecksumOk() | ir.HeaderRef():
            return ()
        case ir.RegRead():
            return (e.index,)
        case ir.Hash() | ir.ExternCall():
            return e.args
        case ir.CsumUpdate():
            return (e.csum, e.old, e.new)
        case ir.CounterOp():
            return (e.index,)
        case ir.Unary() | ir.Cast():
            return (e.operand,)
        case ir.Binary():
            return (e.left, e.right)
        case ir.Slice():
            return (e.base,)
        case _:
            assert_never(e)


def walk_expr(e: ir.Expr) -> Iterator[ir.Expr]:
    yield e
    for c in children(e):
        yield from walk_expr(c)


def expr_reads(e: ir.Expr) -> set[Loc]:
    out: set[Loc] = set()
    for x in walk_expr(e):
        loc = loc_of(x)
        if loc is not None:
            out.add(loc)
        elif isinstance(x, ir.Valid | ir.ChecksumOk):
            out.add(("valid", x.inst))
            if isinstance(x, ir.ChecksumOk):
                out.add(("hdrall", x.inst))
        elif isinstance(x, ir.Result):
            out.add(("result", x.table))
        elif isinstance(x, ir.HeaderRef):
            out.add(("valid", x.inst))
            out.add(("hdrall", x.inst))
    return out


def stmt_exprs(s: ir.Stmt) -> tuple[ir.Expr, ...]:
    match s:
        case ir.Assign():
            idx = (s.target.index,) if isinstance(s.target, ir.RegRead) else ()
            return (s.value, *idx)
        case ir.If():
            return (s.cond,)
        case ir.Push() | ir.Insert():
            vals = tuple(e for _, e in (s.inits if isinstance(s, ir.Push) else s.values))
            extra = (s.timeout,) if isinstance(s, ir.Insert) and s.timeout is not None else ()
            return vals + extra
        case ir.Forward():
            return (s.port,)
        case ir.Verify():
            return (s.cond,)
        case ir.Eval():
            return (s.expr,)
        case ir.Lookup() | ir.Pop() | ir.Drop() | ir.Punt() | ir.Remove() | ir.Refresh() | ir.Extract():
            return ()
        case _:
            assert_never(s)


def stage_objects(stage: ir.Stage) -> set[str]:
    """The registers, counters and meters ``stage`` reads, writes, counts or executes."""
    out: set[str] = set()
    for s in walk_stmts(stage.body):
        if isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead):
            out.add(s.target.reg)
        for e in stmt_exprs(s):
            out |= {x.reg if isinstance(x, ir.RegRead) else x.obj for x in walk_expr(e)
                    if isinstance(x, ir.RegRead | ir.CounterOp)}
    return out


def walk_stmts(stmts: tuple[ir.Stmt, ...]) -> Iterator[ir.Stmt]:
    for s in stmts:
        yield s
        if isinstance(s, ir.If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)
        elif isinstance(s, ir.Lookup):
            yield from walk_stmts(s.hit)
            yield from walk_stmts(s.miss)


def _effects(prog: ir.Program, unit: Unit) -> None:
    for s in walk_stmts(unit.stmts):
        for e in stmt_exprs(s):
            unit.reads |= expr_reads(e)
            if any(isinstance(x, ir.CounterOp | ir.ExternCall) for x in walk_expr(e)):
                unit.stateful = True
            _extern_effects(e, unit)
        _stmt_effects(prog, s, unit)


def _extern_effects(e: ir.Expr, unit: Unit) -> None:
    """An extern call reads and writes the packet, and the validity of the headers it is given."""
    for x in walk_expr(e):
        if isinstance(x, ir.ExternCall):
            unit.writes |= {("valid", a.inst) for a in x.args if isinstance(a, ir.HeaderRef)}
            unit.writes.add(("pkt",))
            unit.reads.add(("pkt",))


def order_free(prog: ir.Program, stages: Iterable[str]) -> bool:
    """Whether what ``stages`` do to one packet cannot change what they do to another: no
    data-plane state touched (a lookup may remove an expired entry), no register written, no
    meter executed (its colour depends on the order of the packets through it) and no extern
    called (each keeps state: alloc_port's pool, the replay windows, ESP's sequence numbers),
    in a statement or in the key of a table looked up (nor a counter there: that key is not
    built ahead, so its lookup is not in bulk).  Counters only add up.  Then packets may
    run them in any interleaving, as a server running a burst stage by stage does (its profile's
    ``stage_major`` op): every lookup in bulk at its stage's entry."""
    for name in stages:
        for s in walk_stmts(prog.stages[name].body):
            if isinstance(s, ir.Insert | ir.Remove | ir.Refresh) or \
                    (isinstance(s, ir.Lookup) and prog.tables[s.table].is_state) or \
                    (isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead)):
                return False
            if any((isinstance(n, ir.CounterOp) and n.method == "execute") or isinstance(n, ir.ExternCall)
                   for e in stmt_exprs(s) for n in walk_expr(e)):
                return False
            # a counter in a key counts too: such a key is never built ahead (it would count twice)
            keys = [k.expr for k in prog.tables[s.table].keys] if isinstance(s, ir.Lookup) else []
            if any(isinstance(n, ir.CounterOp | ir.ExternCall) for e in keys for n in walk_expr(e)):
                return False
    return True


def stmt_writes(prog: ir.Program, s: ir.Stmt) -> set[Loc]:
    """What statement ``s`` itself writes, not the statements nested in it (an if's arms, a
    lookup's hit and miss blocks)."""
    unit = Unit("", 0, (), ())
    for e in stmt_exprs(s):
        _extern_effects(e, unit)
    _stmt_effects(prog, s, unit)
    return unit.writes


def changed_by(reads: set[Loc], writes: set[Loc]) -> bool:
    """Whether locations ``reads`` may read differently after ``writes``: the same location, a
    field of a header whose validity changed (an invalid header's fields read 0) or after an
    extern wrote the packet, or the packet's length after any header was added or removed."""
    valid = {w[1] for w in writes if w[0] == "valid"}
    packet = ("pkt",) in writes
    for r in reads:
        if r in writes or (r[0] in ("hdr", "hdrall") and (r[1] in valid or packet)):
            return True
        if r[0] == "hdrall" and any(w[0] == "hdr" and w[1] == r[1] for w in writes):
            return True
        if r == ("std", "packet_length") and (valid or packet):  # an extern may resize the packet (ESP)
            return True
    return False


def _stmt_effects(prog: ir.Program, s: ir.Stmt, unit: Unit) -> None:
    match s:
        case ir.Assign():
            loc = loc_of(s.target)
            if loc is not None:
                unit.writes.add(loc)
            if isinstance(s.target, ir.RegRead):
                unit.stateful = True
        case ir.Lookup():
            t = prog.tables[s.table]
            for k in t.keys:
                unit.reads |= expr_reads(k.expr)
            unit.writes.add(("result", s.table))
        case ir.Push():
            unit.writes.add(("valid", s.inst))
            unit.writes |= {("hdr", s.inst, f.name) for f in prog.header_of(s.inst).fields}
        case ir.Pop():
            unit.writes.add(("valid", s.inst))
        case ir.Forward():
            unit.writes.add(("std", "egress"))
        case ir.Drop() | ir.Punt() | ir.Verify():
            unit.may_stop = True
        case ir.Insert() | ir.Remove() | ir.Refresh():
            unit.stateful = True
            for k in prog.tables[s.state].keys:
                unit.reads |= expr_reads(k.expr)
        case ir.If() | ir.Eval() | ir.Extract():
            pass
        case _:
            assert_never(s)


BUILTIN_REASONS = ("bad_bridge", "no_egress", "no_pipeline", "parser_no_match", "truncated")
# a target's crypto may fail where the reference cannot (no memory for an SA's session, a packet
# too big for the buffer): such packets are dropped and counted by this reason
CRYPTO_EXTERNS = ("esp_encrypt", "esp_decrypt", "esp_encrypt_esn", "esp_decrypt_esn", "esp_encrypt_cbc",
                  "esp_decrypt_cbc")
CRYPTO_REASON = "crypto_unavailable"


def drop_reasons(prog: ir.Program) -> tuple[str, ...]:
    """Every drop reason a part of the program can give, sorted: reason code = index + 1
    on every target (the switch's counters and the server's use the same codes)."""
    in_stages = {s.reason for st in prog.stages.values() for s in walk_stmts(st.body)
                 if isinstance(s, ir.Drop | ir.Verify)}
    crypto = {CRYPTO_REASON for st in prog.stages.values() for s in walk_stmts(st.body) for e in stmt_exprs(s)
              for x in walk_expr(e) if isinstance(x, ir.ExternCall) and x.name in CRYPTO_EXTERNS}
    return tuple(sorted(set(BUILTIN_REASONS) | set(prog.reasons) | in_stages | crypto))


def punt_reasons(prog: ir.Program) -> tuple[str, ...]:
    """Every punt reason of the program's parsers and stages, sorted."""
    in_stages = {s.reason for st in prog.stages.values() for s in walk_stmts(st.body) if isinstance(s, ir.Punt)}
    in_parsers = {t.name for g in prog.parsers.values() for st in g.states
                  for t in (st.default, *(cs.target for cs in st.cases)) if t.kind == "punt"}
    return tuple(sorted(in_stages | in_parsers))


def stage_units(prog: ir.Program, stage: ir.Stage) -> list[Unit]:
    """Split a stage into units (see module docstring), with their read/write sets."""
    units: list[Unit] = []
    run: list[ir.Stmt] = []

    def flush() -> None:
        if run:
            units.append(Unit(stage.name, len(units), (), tuple(run)))
            run.clear()

    for s in stage.body:
        tables = tuple(x.table for x in walk_stmts((s,)) if isinstance(x, ir.Lookup))
        if tables:
            flush()
            units.append(Unit(stage.name, len(units), tables, (s,)))
        else:
            run.append(s)
    flush()
    for u in units:
        _effects(prog, u)
    return units


def _walk_placed(prog: ir.Program, stmts: tuple[ir.Stmt, ...], skip_cached_miss: bool) -> Iterator[ir.Stmt]:
    for s in stmts:
        yield s
        if isinstance(s, ir.If):
            yield from _walk_placed(prog, s.then, skip_cached_miss)
            yield from _walk_placed(prog, s.orelse, skip_cached_miss)
        elif isinstance(s, ir.Lookup):
            yield from _walk_placed(prog, s.hit, skip_cached_miss)
            if not (skip_cached_miss and prog.tables[s.table].hints.cache):
                yield from _walk_placed(prog, s.miss, skip_cached_miss)


# std fields a target may lack, each the capability (op) of the same name; std.ingress_port
# is everywhere.
STD_CAPABILITY = ("packet_length", "timestamp")


def parser_uses(graph: ir.ParserGraph) -> list[Use]:
    """The capabilities a parse graph needs beyond extract and select: the std fields it reads,
    and ``register_sequence`` for a register it reads (a switch reaches a register through the
    one stateful-ALU access of the stage that uses it, not from its parser)."""
    exprs = [e for st in graph.states for s in st.stmts for e in stmt_exprs(s)]
    exprs += [e for st in graph.states for e in st.select]
    regs = [Use("register_sequence", x.span, f"register '{x.reg}' read") for e in exprs for x in walk_expr(e)
            if isinstance(x, ir.RegRead)]
    return [u for e in exprs for x in walk_expr(e) for u in _expr_uses_std(x)] + regs


def _expr_uses_std(x: ir.Expr) -> list[Use]:
    return [Use(x.name, x.span, f"std.{x.name}")] if isinstance(x, ir.StdField) and x.name in STD_CAPABILITY else []


def stage_uses(prog: ir.Program, stage: ir.Stage, skip_cached_miss: bool = False) -> list[Use]:
    """Every operation and match kind the stage needs, with the span that needs it.

    With ``skip_cached_miss`` (asked for a switch) the miss branch of a lookup in a
    ``cache = true`` table is left out: on the switch a miss sends the packet to the
    server, which runs the whole stage against the full table.
    """
    uses: list[Use] = []
    for s in _walk_placed(prog, stage.body, skip_cached_miss):
        uses += _stmt_uses(prog, s)
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                uses += _expr_uses(prog, x)
    return uses


def _stmt_uses(prog: ir.Program, s: ir.Stmt) -> list[Use]:
    match s:
        case ir.Assign():
            op = "register" if isinstance(s.target, ir.RegRead) else "assign"
            return [Use(op, s.span, "register write" if op == "register" else "assignment")]
        case ir.Lookup():
            t = prog.tables[s.table]
            out = [Use(f"match:{k.match}", k.span, f"{k.match} match on {k.name} of table '{t.name}'", by_table=True)
                   for k in t.keys]
            if t.is_state and not t.hints.cache:  # priced as a lookup of its table alone (stage_cost_ns)
                out.append(Use("dataplane_insert", s.span, f"lookup in data-plane state '{t.name}'", by_table=True))
            return [Use("lookup", s.span, f"lookup in '{t.name}'", by_table=True), *out]
        case ir.Push() | ir.Pop():
            return [Use("push_pop", s.span, f"{'push' if isinstance(s, ir.Push) else 'pop'} {s.inst}")]
        case ir.Forward():
            return [Use("forward", s.span, "forward")]
        case ir.Drop():
            return [Use("drop", s.span, "drop")]
        case ir.Punt():
            return [Use("punt", s.span, "punt")]
        case ir.Refresh() if prog.tables[s.state].hints.cache:
            return []  # as a lookup in cached state: on the switch the cache's idle timeout is the timer
        case ir.Refresh():  # the cost model prices it as a lookup of its table alone
            return [Use("dataplane_insert", s.span, f"refresh of '{s.state}'", by_table=True)]
        case ir.Insert() | ir.Remove():
            verb = "insert into" if isinstance(s, ir.Insert) else "remove from"
            return [Use("dataplane_insert", s.span, f"{verb} '{s.state}'")]
        case ir.Verify():
            return [Use("drop", s.span, "verify")]
        case ir.If() | ir.Eval() | ir.Extract():
            return []
        case _:
            assert_never(s)


def _expr_uses(prog: ir.Program, x: ir.Expr) -> list[Use]:
    match x:
        case ir.ExternCall():
            return [Use(op, x.span, f"{x.name}()") for op in prog.externs[x.name].requires]
        case ir.Hash():
            return [Use("hash", x.span, f"{x.alg}()")]
        case ir.CounterOp():
            kind = prog.counters[x.obj].kind
            return [Use(kind, x.span, f"{kind} '{x.obj}'")]
        case ir.RegRead():
            return [Use("register", x.span, f"register '{x.reg}'")]
        case ir.ChecksumOk():
            return [Use("checksum", x.span, "checksum_ok()")]
        case ir.CsumUpdate():
            return [Use("checksum", x.span, "csum_update()")]
        case ir.Binary() | ir.Unary():
            return [Use("arith", x.span, f"'{x.op}'")]
        case _:
            return _expr_uses_std(x)
