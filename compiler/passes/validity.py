"""Pass ``check-validity``: a stage must not use a header that can never be valid there.

Precondition: lowered IR.  For each pipeline, the headers its parser may extract are
possibly valid at the first stage; ``push`` adds a header, an unconditional ``pop``
removes it.  Reading or writing a field of a header outside that set is E041.  The sets
at every stage entry are kept: the bridge pass lays out validity bits from them.

``must_be_valid`` is the dual: the headers valid on *every* path to a stage entry (the
parser extracts them on every accepting path, no stage on the way pops them or hands them
to an extern).  A bridge requires their validity bits: a receiver that finds one clear
drops the packet as ``bad_bridge`` instead of reading a field of a header that cannot be
missing there.

Before: ``parser p { ... extract eth; ... }  stage s { vxlan.vni = 1; }``
After:  ``error[E041]: header 'vxlan' can never be valid here ...``
"""

from __future__ import annotations

from collections.abc import Callable

from compiler import ir
from compiler.analysis import expr_reads, stmt_exprs
from lang.diagnostics import Diagnostics, Span

__all__ = ["check_validity", "longest_extracts", "may_step", "must_be_valid", "must_branches", "must_step",
           "packet_order", "parser_may_extract", "parser_state_must", "reachable_states"]


def parser_may_extract(graph: ir.ParserGraph) -> frozenset[str]:
    """Instances extracted in some state reachable from ``start``."""
    return frozenset(s.inst for st in reachable_states(graph) for s in st.stmts if isinstance(s, ir.Extract))


def reachable_states(graph: ir.ParserGraph) -> list[ir.ParserState]:
    """The states reachable from ``start``, in declaration order."""
    seen, todo = {"start"}, ["start"]
    while todo:
        st = graph.state(todo.pop())
        for t in (*[c.target for c in st.cases], st.default):
            if t.kind == "state" and t.name not in seen:
                seen.add(t.name)
                todo.append(t.name)
    return [st for st in graph.states if st.name in seen]


def longest_extracts(graph: ir.ParserGraph) -> int:
    """The most headers one packet's path through ``graph`` extracts (the graph has no loop: E040)."""
    done: dict[str, int] = {}

    def walk(name: str) -> int:
        if name not in done:
            st = graph.state(name)
            nxt = [t.name for t in (*[c.target for c in st.cases], st.default) if t.kind == "state"]
            done[name] = sum(isinstance(s, ir.Extract) for s in st.stmts) + max(map(walk, nxt), default=0)
        return done[name]

    return walk("start")


def parser_state_must(graph: ir.ParserGraph) -> dict[str, frozenset[str]]:
    """Instances extracted on every path from ``start`` to the entry of each state reachable
    from it (a generator reads their fields in that state without testing validity)."""
    names = [st.name for st in reachable_states(graph)]
    extracted = {n: frozenset(s.inst for s in graph.state(n).stmts if isinstance(s, ir.Extract)) for n in names}
    top = frozenset().union(*extracted.values())
    entry = {n: top for n in names}
    entry["start"] = frozenset()
    changed = True
    while changed:  # the sets only shrink: a fixed point in at most |instances| x |states| rounds
        changed = False
        for n in names:
            st, out = graph.state(n), entry[n] | extracted[n]
            for t in (*[c.target for c in st.cases], st.default):
                if t.kind == "state" and entry[t.name] & out != entry[t.name]:
                    entry[t.name] = entry[t.name] & out
                    changed = True
    return entry


def check_validity(prog: ir.Program, diags: Diagnostics) -> dict[str, frozenset[str]]:
    """Possibly-valid headers at the entry of every stage (and E041 diagnostics)."""
    at_entry: dict[str, frozenset[str]] = {}
    for p in prog.pipelines:
        may = set(parser_may_extract(prog.parsers[p.parser]))
        for s in p.stages:
            at_entry[s] = frozenset(may)
            may = _block(prog, prog.stages[s].body, may, p, diags)
        at_entry[f"{p.name}:end"] = frozenset(may)
    return at_entry


def _block(prog: ir.Program, stmts: tuple[ir.Stmt, ...], may: set[str], p: ir.Pipeline,
           diags: Diagnostics) -> set[str]:
    """Possibly-valid headers after ``stmts`` on the paths that go on processing."""
    out = _flow(stmts, may, lambda s, cur: _check(prog, s, cur, p, diags))
    return out if out is not None else set()


def may_step(s: ir.Stmt, may: frozenset[str]) -> frozenset[str] | None:
    """Headers possibly valid after statement ``s`` when ``may`` are before it (None: no path
    goes on).  Generators track it from a cut's entry (the headers its bridge can carry): a
    header outside it is invalid there, so its fields read as 0 and its tests fold."""
    out = _flow((s,), set(may), None)
    return None if out is None else frozenset(out)


def _flow(stmts: tuple[ir.Stmt, ...], may: set[str],
          check: Callable[[ir.Stmt, set[str]], None] | None) -> set[str] | None:
    """Like ``_block`` but None when every path drops or punts (it joins no later path);
    ``check`` sees every statement with the headers possibly valid before it."""
    cur = set(may)
    for s in stmts:
        if check is not None:
            check(s, cur)
        cur |= _extern_headers(s)
        if isinstance(s, ir.Push):
            cur.add(s.inst)
        elif isinstance(s, ir.Pop):
            cur.discard(s.inst)
        elif isinstance(s, ir.Drop | ir.Punt):
            return None
        elif isinstance(s, ir.If | ir.Lookup):
            a, b = (s.then, s.orelse) if isinstance(s, ir.If) else (s.hit, s.miss)
            joined = _join(_flow(a, cur, check), _flow(b, cur, check))
            if joined is None:
                return None
            cur = joined
    return cur


def _extern_headers(s: ir.Stmt) -> set[str]:
    """The header-typed arguments of a statement's extern calls."""
    from compiler.analysis import stmt_exprs, walk_expr

    return {a.inst for e in stmt_exprs(s) for x in walk_expr(e) if isinstance(x, ir.ExternCall)
            for a in x.args if isinstance(a, ir.HeaderRef)}


def must_be_valid(prog: ir.Program) -> dict[str, frozenset[str]]:
    """Headers valid on every path to the entry of every stage (keys as ``check_validity``'s)."""
    at_entry: dict[str, frozenset[str]] = {}
    order = packet_order(prog)
    for p in prog.pipelines:
        must = _parser_must(prog.parsers[p.parser], "start", frozenset()) or frozenset()
        for s in p.stages:
            at_entry[s] = must
            must = _must_flow(prog.stages[s].body, must, order) or frozenset()
        at_entry[f"{p.name}:end"] = must
    return at_entry


def _parser_must(graph: ir.ParserGraph, name: str, visiting: frozenset[str]) -> frozenset[str] | None:
    """Headers extracted on every path from state ``name`` to ``accept`` (None: no such path)."""
    if name in visiting:  # a loop: nothing more is guaranteed along it
        return frozenset()
    st = graph.state(name)
    here = frozenset(s.inst for s in st.stmts if isinstance(s, ir.Extract))
    after: frozenset[str] | None = None
    for t in (*[c.target for c in st.cases], st.default):
        if t.kind == "accept":
            sub: frozenset[str] | None = frozenset()
        elif t.kind == "state":
            sub = _parser_must(graph, t.name, visiting | {name})
        else:  # drop, punt: the packet reaches no stage
            continue
        after = _meet(after, sub)
    return None if after is None else here | after


def packet_order(prog: ir.Program) -> tuple[str, ...]:
    """The header instances in packet order (must_step's ``order``)."""
    return tuple(i.name for i in prog.instances)


def _must_flow(stmts: tuple[ir.Stmt, ...], must: frozenset[str], order: tuple[str, ...]) -> frozenset[str] | None:
    """Headers valid after ``stmts`` on every path that goes on (None: every path ends)."""
    cur: frozenset[str] | None = must
    for s in stmts:
        if cur is None:
            return None
        cur = must_step(s, cur, order)
    return cur


def must_step(s: ir.Stmt, must: frozenset[str], order: tuple[str, ...]) -> frozenset[str] | None:
    """Headers valid on every path after statement ``s`` when ``must`` are valid before it
    (None: no path goes on); ``order``: the instances in packet order (packet_order).
    Generators track it to guard reads of the other headers."""
    must = _after_externs(s, must, order)
    if isinstance(s, ir.Push):
        return must | {s.inst}
    if isinstance(s, ir.Pop):
        return must - {s.inst}
    if isinstance(s, ir.Drop | ir.Punt):
        return None
    if isinstance(s, ir.If | ir.Lookup):
        (a, ma), (b, mb) = must_branches(s, must, order)
        return _meet(_must_flow(a, ma, order), _must_flow(b, mb, order))
    return must


def _after_externs(s: ir.Stmt, must: frozenset[str], order: tuple[str, ...]) -> frozenset[str]:
    """``must`` less what the statement's own extern calls may invalidate: the headers they are
    handed (esp_decrypt) and those after them (esp_encrypt encrypts what follows its esp)."""
    handed = _extern_headers(s)
    if not handed:
        return must
    last = max(order.index(h) for h in handed)
    return must - handed - set(order[last + 1:])


def must_branches(s: ir.If | ir.Lookup, must: frozenset[str], order: tuple[str, ...]
                  ) -> tuple[tuple[tuple[ir.Stmt, ...], frozenset[str]], tuple[tuple[ir.Stmt, ...], frozenset[str]]]:
    """The two branches of ``s`` with the headers valid on entry to each: ``if (valid(h)
    && ...)`` adds ``h`` to its then-branch, ``if (!valid(h) || ...)`` to its else-branch (so
    after ``if (!valid(h)) { drop(..); }`` h is valid); an extern call in the condition has run
    (``if (esp_decrypt(outer, esp, ..))``: neither branch may take ``esp`` as valid)."""
    must = _after_externs(s, must, order)
    if isinstance(s, ir.Lookup):
        return (s.hit, must), (s.miss, must)
    return (s.then, must | _tested_valid(s.cond)), (s.orelse, must | _tested_invalid(s.cond))


def _tested_valid(cond: ir.Expr) -> frozenset[str]:
    """The headers ``cond`` being true proves valid."""
    if isinstance(cond, ir.Valid):
        return frozenset({cond.inst})
    if isinstance(cond, ir.Binary) and cond.op == "&&":
        return _tested_valid(cond.left) | _tested_valid(cond.right)
    if isinstance(cond, ir.Unary) and cond.op == "!":
        return _tested_invalid(cond.operand)
    return frozenset()


def _tested_invalid(cond: ir.Expr) -> frozenset[str]:
    """The headers ``cond`` being false proves valid."""
    if isinstance(cond, ir.Unary) and cond.op == "!":
        return _tested_valid(cond.operand)
    if isinstance(cond, ir.Binary) and cond.op == "||":
        return _tested_invalid(cond.left) | _tested_invalid(cond.right)
    return frozenset()


def _meet(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _join(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _check(prog: ir.Program, s: ir.Stmt, may: set[str], p: ir.Pipeline, diags: Diagnostics) -> None:
    exprs = list(stmt_exprs(s))
    if isinstance(s, ir.Assign) and isinstance(s.target, ir.HeaderField):
        exprs.append(s.target)
    if isinstance(s, ir.Lookup):
        exprs += [k.expr for k in prog.tables[s.table].keys]
    for e in exprs:
        for loc in sorted(expr_reads(e)):
            if loc[0] == "hdr" and loc[1] not in may:
                span = _span_of(e, loc[1]) or s.span
                diags.error("E041", f"header '{loc[1]}' can never be valid here: parser '{p.parser}' of pipeline "
                            f"'{p.name}' does not extract it and no earlier stage pushes it", span)
                return


def _span_of(e: ir.Expr, inst: str) -> Span | None:
    from compiler.analysis import walk_expr

    for x in walk_expr(e):
        if isinstance(x, ir.HeaderField) and x.inst == inst:
            return x.span
    return None
