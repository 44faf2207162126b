"""Name resolution and type checking of a parsed .nfp program.

Input: the modules of a program (the main file and its imports).  Output: a
``CheckedProgram`` holding the symbol tables and the type of every expression, or
diagnostics.  Checking goes on after an error so that independent mistakes are all
reported in one run.
"""

from __future__ import annotations

from collections.abc import Iterable

from lang import ast
from lang.check_expr import ExprChecker
from lang.check_values import check_count, check_number, check_port_list, check_timeout
from lang.diagnostics import Diagnostics, Span
from lang.limits import MAX_TIMEOUT_SECONDS
from lang.symbols import (
    MATCH_KINDS,
    PIPELINE_PROPS,
    SHARD_METHODS,
    TABLE_PROPS,
    CheckedProgram,
    Scope,
    is_field_ref,
    is_hit_ref,
    key_field_name,
    quantity_fraction,
)
from lang.types import Bits, Bool, IntLiteral, Type, Unknown, show

__all__ = ["check"]

def check(modules: Iterable[ast.Module], main_file: str, diags: Diagnostics) -> CheckedProgram:
    """Resolve names and check types; errors go to ``diags``."""
    checker = _Checker(diags)
    checker.collect(modules)
    checker.check_all()
    return CheckedProgram(main_file, checker.sym, checker.types, checker.const_values, {})


_KIND_OF_DECL: dict[type, str] = {
    ast.HeaderDecl: "headers",
    ast.ConstDecl: "consts",
    ast.ParserDecl: "parsers",
    ast.TableDecl: "tables",
    ast.RegisterDecl: "registers",
    ast.CounterDecl: "counters",
    ast.ExternDecl: "externs",
    ast.StageDecl: "stages",
    ast.PipelineDecl: "pipelines",
    ast.PortsDecl: "ports",
    ast.TargetDecl: "targets",
    ast.DeploymentDecl: "deployments",
}

# Names that share one namespace (referred to by bare name in expressions and properties).
_VALUE_KINDS = ("instances", "consts", "tables", "registers", "counters", "externs")


class _Checker(ExprChecker):
    """Declarations and statements; expressions are ``ExprChecker``'s."""

    def __init__(self, diags: Diagnostics) -> None:
        super().__init__(diags)
        self.const_values: dict[str, int] = {}
        self.used_tables: set[str] = set()
        self.lookup_stage: dict[str, tuple[str, Span]] = {}  # table -> (stage, span) of its lookup
        self._stage = ""
        self._stage_locals: dict[str, tuple[Type, Span]] = {}  # every 'let' of the stage being checked
    # ---- collection ----------------------------------------------------------------------

    def collect(self, modules: Iterable[ast.Module]) -> None:
        for module in modules:
            self.broken.update(module.broken)
            for decl in module.decls:
                self._collect(decl)

    def _collect(self, decl: ast.Decl) -> None:
        match decl:
            case ast.Import():
                return
            case ast.PacketDecl():
                for inst in decl.instances:
                    self._define("instances", inst.name, inst, inst.span)
            case ast.MetadataDecl():
                for f in decl.fields:
                    if f.name in self.sym.metadata:
                        self._dup(f.name, f.span, self.sym.metadata[f.name].span)
                    self.sym.metadata[f.name] = f
            case _:
                self._define(_KIND_OF_DECL[type(decl)], decl.name, decl, decl.span)

    def _define(self, kind: str, name: str, node: object, span: Span) -> None:
        table: dict[str, object] = getattr(self.sym, kind)
        clash = name in table or (kind in _VALUE_KINDS and any(
            name in getattr(self.sym, k) for k in _VALUE_KINDS))
        if clash:
            prev = self._span_of_name(name)
            self._dup(name, span, prev)
            return
        table[name] = node

    def _span_of_name(self, name: str) -> Span | None:
        kind = self.sym.kind_of(name)
        if kind is None:
            return None
        node = getattr(self.sym, kind)[name]
        return node.span  # type: ignore[no-any-return]

    def _dup(self, name: str, span: Span, prev: Span | None) -> None:
        related = ((prev, "first defined here"),) if prev else ()
        self.d.error("E010", f"'{name}' is defined twice", span, related=related)

    # ---- declarations --------------------------------------------------------------------

    def check_all(self) -> None:
        for h in self.sym.headers.values():
            self._check_header(h)
        for inst in self.sym.instances.values():
            if inst.header_type not in self.sym.headers:
                self._unknown(inst.header_type, "header type", inst.span)
        for f in self.sym.metadata.values():
            self._width(f.type)
        for c in self.sym.consts.values():
            self._check_const(c)
        for p in self.sym.parsers.values():
            self._check_parser(p)
        for t in self.sym.tables.values():
            self._check_table(t)
        holders = [prop for t in self.sym.tables.values() for prop in t.props if prop.name == "holds_ports"]
        for prop in holders[1:]:
            self.d.error("E032", "only one state may hold the ports alloc_port gives out", prop.span)
        for r in self.sym.registers.values():
            self._width(r.type)
            self._count(r.size, "register size")
        for c2 in self.sym.counters.values():
            self._count(c2.size, f"{c2.kind} size")
        for e in self.sym.externs.values():
            for prm in e.params:
                if isinstance(prm, ast.HeaderParam):
                    if prm.header_type not in self.sym.headers:
                        self._unknown(prm.header_type, "header type", prm.span)
                else:
                    self._width(prm.type)
            if e.ret:
                self._width(e.ret)
        for s in self.sym.stages.values():
            self._stage, self._stage_locals = s.name, {}
            self._block(s.body, Scope())
        self._stage = ""
        self._check_pipelines()
        for pd in self.sym.ports.values():
            check_port_list(pd.ports, self.d)
        settings: list[ast.TargetDecl | ast.DeploymentDecl] = [*self.sym.targets.values(),
                                                                *self.sym.deployments.values()]
        for decl in settings:
            self._check_settings(decl.props)
        for dep in self.sym.deployments.values():
            self._check_shards(dep.shards)
        self._warn_unused()

    def _warn_unused(self) -> None:
        """W001: declarations nothing refers to (usually a typo elsewhere)."""
        in_pipelines = {n for pl in self.sym.pipelines.values() for p in pl.props
                        if isinstance(p.value, ast.NameList | ast.NameValue)
                        for n in (p.value.names if isinstance(p.value, ast.NameList) else (p.value.name,))}
        for t in self.sym.tables.values():
            if t.name not in self.used_tables:
                self.d.warning("W001", f"table '{t.name}' is never looked up or written", t.span)
        for s in self.sym.stages.values():
            if s.name not in in_pipelines:
                self.d.warning("W001", f"stage '{s.name}' is in no pipeline", s.span)
        for pr in self.sym.parsers.values():
            if pr.name not in in_pipelines:
                self.d.warning("W001", f"parser '{pr.name}' is used by no pipeline", pr.span)
    def _check_header(self, h: ast.HeaderDecl) -> None:
        seen: dict[str, Span] = {}
        total = 0
        for f in h.fields:
            if f.name in seen:
                self._dup(f.name, f.span, seen[f.name])
            seen[f.name] = f.span
            t = self._width(f.type)
            if not isinstance(t, Bits):
                self.d.error("E020", f"header field '{f.name}' must be bit<N>, not bool", f.type.span)
                continue
            total += t.width
        if total % 8:
            self.d.error("E022", f"header '{h.name}' must be a whole number of bytes, not {total} bits", h.span)
        if h.checksum:
            name, span = h.checksum
            fd = next((f for f in h.fields if f.name == name), None)
            if fd is None:
                self.d.error("E012", f"header '{h.name}' has no field '{name}'", span)
            elif fd.type.width != 16:
                self.d.error("E020", f"checksum field must be bit<16>, not bit<{fd.type.width}>", span)

    def _check_const(self, c: ast.ConstDecl) -> None:
        """A const is a named literal (lowering replaces every use by its value)."""
        t = self._width(c.type)
        if not isinstance(c.value, ast.IntLit | ast.BoolLit):
            self.d.error("E020", f"const '{c.name}' must be a literal (a number, an address, true or false), "
                         "not an expression", c.value.span)
            return
        self._expect(c.value, t, Scope())
        self.const_values[c.name] = int(c.value.value)

    def _count(self, v: ast.PropValue, what: str) -> int:
        return check_count(v, what, self.d)

    def _check_settings(self, props: tuple[ast.Property, ...]) -> None:
        """Target and deployment properties: their meaning is lang-independent (compiler.profiles
        checks names and units), but every number and port list must be in range."""
        for p in props:
            check_number(p, self.d)
            if isinstance(p.value, ast.LimitList):
                self.d.error("E032", f"{p.name}: a list of limits is only a cached table's idle_limits", p.value.span)

    def _check_shards(self, shards: tuple[ast.ShardBy, ...]) -> None:
        """``shard by hash(k, ...)`` / ``shard by range(k)``: once per deployment, keys of bit<N>
        (what they may read is the compiler's: compiler/passes/ports.py)."""
        for extra in shards[1:]:
            self.d.error("E060", "a deployment has one 'shard by' clause", extra.span)
        for sh in shards:
            if sh.method not in SHARD_METHODS:
                self.d.error("E060", f"shard by '{sh.method}': say hash(key, ...) or range(key)", sh.span)
            if sh.method == "range" and len(sh.keys) != 1:
                self.d.error("E023", f"range(...) takes one key, not {len(sh.keys)}", sh.span)
            for k in sh.keys:
                if isinstance(self._expect(k, None, Scope(), want_bits=True), IntLiteral):
                    self.d.error("E060", "a shard key is a field (or an expression of fields), not a bare number: "
                                 "the same number for every packet steers nothing", k.span)

    # ---- parse graphs --------------------------------------------------------------------

    def _check_parser(self, p: ast.ParserDecl) -> None:
        states: dict[str, ast.ParserState] = {}
        for st in p.states:
            if st.name in states:
                self._dup(st.name, st.span, states[st.name].span)
            states[st.name] = st
        if "start" not in states:
            self.d.error("E040", f"parser '{p.name}' must have a state named 'start'", p.span)
        scope = Scope(in_parser=True)
        for st in p.states:
            for stmt in st.stmts:
                self._stmt(stmt, scope)
            self._check_transition(st.transition, states, scope)
        self._check_cycles(p, states)

    def _check_transition(self, tr: ast.Transition, states: dict[str, ast.ParserState], scope: Scope) -> None:
        targets = [tr.direct] if tr.direct else [c.target for c in tr.cases]
        for tgt in targets:
            if tgt and tgt.kind == "state" and tgt.name not in states:
                self._unknown(tgt.name, "parser state", tgt.span)
        types = [self._expr(e, scope) for e in tr.exprs]
        for t, e in zip(types, tr.exprs, strict=True):
            if not isinstance(t, Bits | Unknown):
                self.d.error("E020", f"select expression must be bit<N>, not {show(t)}", e.span)
        for case in tr.cases:
            if case.keys is None:
                continue
            if len(case.keys) != len(types):
                self.d.error("E023", f"select case has {len(case.keys)} values, expected {len(types)}", case.span)
                continue
            for key, t in zip(case.keys, types, strict=True):
                for value in (key.value, key.mask):
                    if value is not None and not isinstance(self._expect(value, t, scope), Unknown):
                        self._constant(value)

    def _constant(self, e: ast.Expr) -> None:
        """Select values and masks are matched as constants: a literal or a const."""
        if not isinstance(e, ast.IntLit | ast.BoolLit) and not (isinstance(e, ast.Name) and e.ident in self.sym.consts):
            self.d.error("E020", "a select value must be a number or a const, not an expression", e.span)

    def _check_cycles(self, p: ast.ParserDecl, states: dict[str, ast.ParserState]) -> None:
        """A cycle would extract one header instance twice: there are no header stacks."""
        color: dict[str, int] = {}

        def visit(name: str) -> bool:
            color[name] = 1
            st = states[name]
            tr = st.transition
            nexts = [tr.direct] if tr.direct else [c.target for c in tr.cases]
            for t in nexts:
                if t is None or t.kind != "state" or t.name not in states:
                    continue
                if color.get(t.name) == 1:
                    self.d.error("E040", f"parse graph has a loop through state '{t.name}'", t.span,
                                 notes=("nfc has no header stacks: each header is extracted at most once",))
                    return True
                if t.name not in color and visit(t.name):
                    return True
            color[name] = 2
            return False

        if "start" in states:
            visit("start")
            for name, st in states.items():
                if name not in color:
                    self.d.warning("W002", f"parser state '{name}' is unreachable from 'start'", st.span)

    # ---- tables --------------------------------------------------------------------------

    def _check_table(self, t: ast.TableDecl) -> None:
        what = "state" if t.is_state else "table"
        if not t.keys:
            self.d.error("E030", f"{what} '{t.name}' must have at least one key field", t.span)
        lpm = [k for k in t.keys if k.kind == "lpm"]
        if len(lpm) > 1:
            self.d.error("E031", f"{what} '{t.name}' may have one lpm key, not {len(lpm)}", lpm[1].kind_span)
        names: dict[str, Span] = {}
        widths = {k.alias or key_field_name(k.expr): self._check_key(t, k, names) for k in t.keys}
        for v in t.values:
            if v.name in names:
                self._dup(v.name, v.span, names[v.name])
            names[v.name] = v.span
            self._width(v.type)
        self._check_props(t)
        held = next((p for p in t.props if p.name == "holds_ports"), None)
        if held is not None:
            self._holds_ports(t, held, widths)

    def _holds_ports(self, t: ast.TableDecl, p: ast.Property, widths: dict[str, int | None]) -> None:
        """``holds_ports = [address, port];``: two key fields of a state, bit<32> and bit<16>
        as alloc_port's pools are, whose entries hold that port of that address's pool."""
        if not t.is_state:
            self.d.error("E032", "only data-plane state holds ports", p.span)
        elif not isinstance(p.value, ast.NameList) or len(p.value.names) != 2:
            self.d.error("E032", "holds_ports names two key fields: [address, port]", p.value.span)
        else:
            for name, want in zip(p.value.names, (32, 16), strict=True):
                if name not in widths:
                    self.d.error("E032", f"'{name}' is not a key field of '{t.name}' (known: {', '.join(widths)})",
                                 p.value.span)
                elif widths[name] not in (want, None):
                    self.d.error("E032", f"holds_ports: '{name}' must be bit<{want}> as alloc_port's "
                                 f"{'address' if want == 32 else 'port'} is, not bit<{widths[name]}>", p.value.span)

    def _check_key(self, t: ast.TableDecl, k: ast.KeyField, names: dict[str, Span]) -> int | None:
        if k.kind not in MATCH_KINDS:
            self.d.error("E031", f"match kind must be one of {', '.join(MATCH_KINDS)}, not '{k.kind}'", k.kind_span)
        elif t.is_state and k.kind != "exact":
            self.d.error("E031", f"state '{t.name}' is written by the data plane: its keys must be exact, "
                         f"not {k.kind}", k.kind_span)
        ty = self._expr(k.expr, Scope())
        if isinstance(ty, Unknown):
            pass
        elif not isinstance(ty, Bits):
            self.d.error("E031", f"table key must be bit<N>, not {show(ty)}", k.expr.span)
        elif not is_field_ref(k.expr):
            self.d.error("E031", "table key must be a header, metadata or std field", k.expr.span)
        key_name = k.alias or key_field_name(k.expr)
        if key_name in names:
            self.d.error("E010", f"key name '{key_name}' is used twice (add 'as NAME')", k.span)
        names[key_name] = k.span
        return ty.width if isinstance(ty, Bits) else None

    def _check_props(self, t: ast.TableDecl) -> None:
        seen: set[str] = set()
        for p in t.props:
            if p.name not in TABLE_PROPS:
                self.d.error("E032", f"unknown table property '{p.name}' (known: {', '.join(sorted(TABLE_PROPS))})",
                             p.span)
            if p.name in seen:
                self.d.error("E032", f"property '{p.name}' is given twice", p.span)
            seen.add(p.name)
        if "size" not in seen:
            self.d.error("E030", f"table '{t.name}' needs a size estimate (size = N;)", t.span)
        for p in t.props:
            if p.name not in ("size", "timeout") and not check_number(p, self.d):
                continue  # size and timeout have tighter bounds of their own
            if p.name == "size":
                self._count(p.value, "size")
            elif p.name in ("active", "traffic"):
                self._fraction(p)
            elif p.name == "timeout" and not t.is_state:
                self.d.error("E032", "only data-plane state has a timeout", p.span)
            elif p.name == "timeout":
                check_timeout(p.value, self.d)
            elif p.name == "pin" and not (isinstance(p.value, ast.NameValue) and p.value.name in ("switch", "server")):
                self.d.error("E032", "pin must be switch or server", p.value.span)
            elif p.name in ("cache", "refresh") and not isinstance(p.value, ast.BoolLit):
                self.d.error("E032", f"{p.name} must be true or false", p.value.span)
            elif p.name in ("updates", "skew") and not isinstance(p.value, ast.IntLit | ast.Quantity):
                self.d.error("E032", f"{p.name} must be a number", p.value.span)
            elif p.name == "idle_limits":
                self._idle_limits(t, p)
            elif isinstance(p.value, ast.LimitList):
                self.d.error("E032", f"{p.name}: a list of limits is only a cached table's idle_limits", p.value.span)

    def _idle_limits(self, t: ast.TableDecl, p: ast.Property) -> None:
        """``idle_limits = [85%: 1100s, 90%: 300s, 95%: 100s];``: how long a cached entry may
        stay idle on the switch, by how full the cache is (the cache manager's policy)."""
        cached = any(q.name == "cache" and isinstance(q.value, ast.BoolLit) and q.value.value for q in t.props)
        if not cached:
            self.d.error("E032", "idle_limits is for a switch cache: the table needs 'cache = true;'", p.span)
        elif not isinstance(p.value, ast.LimitList):
            self.d.error("E032", "idle_limits must be a list like [85%: 1100s, 90%: 300s, 95%: 100s]", p.value.span)
        else:
            seen: set[float] = set()
            for full, idle in p.value.pairs:
                f = quantity_fraction(full)
                if full.unit != "%" or f is None or not 0 <= f <= 1:
                    self.d.error("E032", "an idle limit's occupancy must be a percentage between 0% and 100%",
                                 full.span)
                elif f in seen:
                    self.d.error("E032", f"occupancy {full.number:g}% is given twice", full.span)
                else:
                    seen.add(f)
                check_timeout(idle, self.d)

    def _fraction(self, p: ast.Property) -> None:
        f = quantity_fraction(p.value)
        if f is None or not 0 <= f <= 1:
            self.d.error("E032", f"{p.name} must be a fraction between 0% and 100%", p.value.span)

    # ---- pipelines -----------------------------------------------------------------------

    def _check_pipelines(self) -> None:
        owner: dict[str, str] = {}
        for pl in self.sym.pipelines.values():
            props = {p.name: p for p in pl.props}
            for p in pl.props:
                if p.name not in PIPELINE_PROPS:
                    self.d.error("E032", f"unknown pipeline property '{p.name}'", p.span)
                check_number(p, self.d)
            for need in ("ports", "parser", "stages"):
                if need not in props:
                    self.d.error("E050", f"pipeline '{pl.name}' needs '{need} = ...'", pl.span)
            self._pipeline_refs(pl, props, owner)
            if pl.when is not None:
                self._expect(pl.when, Bool(), Scope())
            if "traffic" in props:
                self._fraction(props["traffic"])

    def _pipeline_refs(self, pl: ast.PipelineDecl, props: dict[str, ast.Property], owner: dict[str, str]) -> None:
        ports = props.get("ports")
        if ports and isinstance(ports.value, ast.NameValue) and ports.value.name not in self.sym.ports:
            self._unknown(ports.value.name, "port group", ports.value.span)
        elif ports and not isinstance(ports.value, ast.NameValue | ast.PortList):
            self.d.error("E050", "ports must be a port group or a list like [0..7]", ports.value.span)
        parser = props.get("parser")
        if parser and (not isinstance(parser.value, ast.NameValue) or parser.value.name not in self.sym.parsers):
            name = parser.value.name if isinstance(parser.value, ast.NameValue) else "?"
            self._unknown(name, "parser", parser.value.span)
        stages = props.get("stages")
        if stages is None:
            return
        if not isinstance(stages.value, ast.NameList):
            self.d.error("E050", "stages must be a list like [a, b]", stages.value.span)
            return
        for s in stages.value.names:
            if s not in self.sym.stages:
                self._unknown(s, "stage", stages.value.span)
            elif s in owner:
                self.d.error("E050", f"stage '{s}' is already in pipeline '{owner[s]}'", stages.value.span)
            owner[s] = pl.name

    # ---- statements ----------------------------------------------------------------------

    def _block(self, b: ast.Block, scope: Scope) -> None:
        inner = scope.child()
        for s in b.stmts:
            self._stmt(s, inner)

    def _stmt(self, s: ast.Stmt, scope: Scope) -> None:
        match s:
            case ast.Assign():
                self._assign(s, scope)
            case ast.Let():
                t = self._width(s.type) if s.type else None
                vt = self._expect(s.value, t, scope) if t else self._expr(s.value, scope)
                if isinstance(vt, IntLiteral) and t is None:
                    self.d.error("E020", f"'let {s.name}' needs a type: an integer literal has no width", s.span)
                    vt = Bits(32)
                self._declare_local(s, t or vt)
                scope.locals[s.name] = t or vt
            case ast.If():
                self._expect(s.cond, Bool(), scope)
                self._block(s.then, scope)
                if s.orelse:
                    self._block(s.orelse, scope)
            case ast.Lookup():
                self._lookup(s, scope)
            case ast.Push():
                self._push(s, scope)
            case ast.Pop():
                self._instance(s.header, s.span)
            case ast.Forward():
                self._port(s.port, scope)
            case ast.Drop() | ast.Punt():
                pass
            case ast.Insert():
                self._insert(s, scope)
            case ast.Remove() | ast.Refresh():
                self._state(s.state, s.span)
            case ast.Verify():
                self._expect(s.cond, Bool(), scope)
            case ast.ExprStmt():
                self._call_stmt(s, scope)
            case ast.Extract():
                if not scope.in_parser:
                    self.d.error("E013", "extract is only allowed in a parser state", s.span)
                self._instance(s.header, s.span)

    def _declare_local(self, s: ast.Let, t: Type) -> None:
        """A stage's locals are one variable per name in the generated code (and in the IR), so a
        name has one type in the whole stage, and a local may not hide a const (E010)."""
        const = self.sym.consts.get(s.name)
        if const is not None:
            self.d.error("E010", f"local '{s.name}' would hide const '{s.name}'", s.span,
                         related=((const.span, "the const"),))
            return
        prev = self._stage_locals.setdefault(s.name, (t, s.span))
        if prev[0] != t and not isinstance(prev[0], Unknown) and not isinstance(t, Unknown):
            self.d.error("E010", f"local '{s.name}' is declared {show(t)} here and {show(prev[0])} before: a local "
                         "has one type in its stage", s.span, related=((prev[1], "declared before"),))

    def _assign(self, s: ast.Assign, scope: Scope) -> None:
        target = s.target
        if isinstance(target, ast.Name) and target.ident in scope.locals:
            t: Type | None = scope.locals[target.ident]
            self.types[id(target)] = scope.locals[target.ident]
        elif isinstance(target, ast.Index) and isinstance(target.base, ast.Name) \
                and target.base.ident in self.sym.registers:
            reg = self.sym.registers[target.base.ident]
            self._expect(target.index, None, scope, want_bits=True)
            t = self._width(reg.type)
            self.types[id(target)] = t
        elif isinstance(target, ast.Member) and is_field_ref(target) and not is_hit_ref(target, scope):
            t = self._expr(target, scope)
            if isinstance(target.base, ast.Name) and target.base.ident == "std":
                self.d.error("E024", f"std.{target.field} is read-only", target.span)
        else:
            self.d.error("E024", "left side of '=' must be a header field, metadata field, local or register "
                         "element", target.span)
            t = None
        if t is not None:
            self._expect(s.value, t, scope)
        else:
            self._expr(s.value, scope)

    def _lookup(self, s: ast.Lookup, scope: Scope) -> None:
        tbl = self.sym.tables.get(s.table)
        self.used_tables.add(s.table)
        if tbl is None:
            self._unknown(s.table, "table", s.table_span)
        elif self._stage:
            first = self.lookup_stage.setdefault(s.table, (self._stage, s.table_span))
            if first[0] != self._stage:
                self.d.error("E030", f"table '{s.table}' is looked up in stages '{first[0]}' and '{self._stage}': "
                             "a table is looked up in one stage (declare a second table)", s.table_span,
                             related=((first[1], "first looked up here"),))
        if s.hit:
            inner = scope.child()
            if s.hit_var:
                inner.hits[s.hit_var] = s.table
            self._block(s.hit, inner)
        if s.miss:
            self._block(s.miss, scope)

    def _push(self, s: ast.Push, scope: Scope) -> None:
        h = self._instance(s.header, s.span)
        if h is None:
            return
        self._inits(s.inits, h.fields, f"header '{h.name}' has no field", scope)

    def _inits(self, inits: tuple[ast.FieldInit, ...], fields: tuple[ast.FieldDecl, ...], unknown: str,
               scope: Scope) -> None:
        """``{ f = e; ... }`` of push and insert: each field exists and gets a value of its type."""
        by_name = {f.name: f for f in fields}
        for init in inits:
            f = by_name.get(init.name)
            if f is None:
                self.d.error("E012", f"{unknown} '{init.name}'", init.span)
                self._expr(init.value, scope)
                continue
            self._expect(init.value, self._width(f.type), scope)

    def _insert_timeout(self, e: ast.Expr, scope: Scope) -> None:
        """An insert's ``timeout`` in seconds: a literal above 0 and at most MAX_TIMEOUT_SECONDS,
        or a value of at most 32 bits (the generated code keeps nanoseconds in 64 bits)."""
        t = self._expect(e, None, scope, want_bits=True)
        if isinstance(t, IntLiteral) and not 0 < t.value <= MAX_TIMEOUT_SECONDS:
            shown = str(t.value) if t.value.bit_length() < 80 else f"of {t.value.bit_length()} bits"
            self.d.error("E090", f"timeout must be above 0s and at most {MAX_TIMEOUT_SECONDS}s, not {shown}s", e.span)
        elif isinstance(t, Bits) and t.width > 32:
            self.d.error("E090", f"timeout must be at most 32 bits of seconds (at most {MAX_TIMEOUT_SECONDS}s), "
                         f"not bit<{t.width}>", e.span)

    def _insert(self, s: ast.Insert, scope: Scope) -> None:
        self.used_tables.add(s.state)
        tbl = self._state(s.state, s.span)
        if s.timeout is not None:
            self._insert_timeout(s.timeout, scope)
        if tbl is None:
            return
        self._inits(s.inits, tbl.values, f"state '{tbl.name}' has no value field", scope)
        missing = sorted({f.name for f in tbl.values} - {i.name for i in s.inits})
        if missing:
            self.d.error("E030", f"insert into '{tbl.name}' must set {', '.join(missing)}", s.span)

    def _state(self, name: str, span: Span) -> ast.TableDecl | None:
        tbl = self.sym.tables.get(name)
        if tbl is None:
            self._unknown(name, "state", span)
            return None
        if not tbl.is_state:
            self.d.error("E013", f"'{name}' is a control-plane table: only 'state' is written by the data plane",
                         span)
            return None
        return tbl

    def _call_stmt(self, s: ast.ExprStmt, scope: Scope) -> None:
        if not isinstance(s.expr, ast.Call):
            self.d.error("E013", "only calls can stand alone as statements", s.span)
            return
        self._expr(s.expr, scope)

    def _port(self, e: ast.Expr, scope: Scope) -> None:
        t = self._expr(e, scope)
        if isinstance(t, IntLiteral):
            self._fits(e, t.value, 16)
            self.types[id(e)] = Bits(16)
        elif not isinstance(t, Bits | Unknown) or (isinstance(t, Bits) and t.width > 16):
            self.d.error("E020", f"port must be bit<N> with N <= 16, not {show(t)}", e.span)

    def _instance(self, name: str, span: Span) -> ast.HeaderDecl | None:
        if name not in self.sym.instances:
            self._unknown(name, "header", span)
            return None
        return self.sym.header_of(name)
