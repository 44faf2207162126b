"""P4 syntax tree → Python closures, typed as P4_16 types them.

Each expression compiles to ``fn(frame) -> int | bool | object`` together with its static
type; each statement to ``fn(frame) -> None``.  A frame is a dict of the names in scope
(block parameters, action parameters, extern instances).  Semantics follow P4_16
(v1.2.x): ``bit<W>`` arithmetic wraps modulo 2^W (§8.5), untyped literals take the width
of the other operand (§8.9.2), casts between ``bit`` widths truncate or zero-extend
(§8.11), ``&&``/``||`` short-circuit, ``exit`` ends the control (§12.5), a slice
``e[h:l]`` is ``bit<h-l+1>`` (§8.6).  Reading a field of an invalid header gives the value
it last held (P4 leaves it unspecified; the lint rejects such reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, assert_never

from emulator.p4.types import INT, TypeEnv, TypeErrorP4
from emulator.p4.values import Obj
from targets.p4 import syntax as p

__all__ = ["ApplyResult", "Compiler", "ExitSignal", "Externs", "Fn", "Frame", "StmtFn"]

Frame = dict[str, Any]
Fn = Callable[[Frame], Any]
StmtFn = Callable[[Frame], None]
Setter = Callable[[Frame, Any], None]

BOOL = p.Bool()


class ExitSignal(Exception):
    """``exit``: stop the current control block."""


class ApplyResult:
    __slots__ = ("action_run", "hit")

    def __init__(self, hit: bool, action_run: str) -> None:
        self.hit = hit
        self.action_run = action_run


class Externs(Protocol):
    """What an architecture provides: extern methods and free functions."""

    def method(self, c: Compiler, inst_type: p.TypeName, obj: Fn, method: str, call: p.Call,
               scope: dict[str, p.Type]) -> tuple[Fn, p.Type]: ...

    def function(self, c: Compiler, name: str, call: p.Call, scope: dict[str, p.Type]) -> tuple[Fn, p.Type] | None: ...


def mask(w: int) -> int:
    return (1 << w) - 1


def _const(value: Any) -> Fn:
    return lambda f: value


class Compiler:
    """Compiles expressions and statements of one program; tables and actions are looked up
    through ``apply_table`` / ``actions``, supplied by the executor."""

    def __init__(self, env: TypeEnv, externs: Externs) -> None:
        self.env = env
        self.externs = externs
        self.actions: dict[str, Callable[[Frame, dict[str, int]], None]] = {}
        self.tables: dict[str, Callable[[Frame], ApplyResult]] = {}
        self.action_decls: list[p.Action] = []

    # ---- expressions -------------------------------------------------------------------------

    def expr(self, e: p.Expr, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        match e:
            case p.Const():
                if e.width == 0:
                    return _const(bool(e.value)), BOOL
                if e.width < 0:
                    return _const(e.value), INT
                if e.value > mask(e.width):
                    raise TypeErrorP4(f"{e.value} does not fit in bit<{e.width}>")
                return _const(e.value), p.Bits(e.width)
            case p.Path():
                return self._path(e.name, scope)
            case p.Member():
                return self._member(e, scope)
            case p.Bin():
                return self._bin(e, scope)
            case p.Un():
                return self._un(e, scope)
            case p.Cast():
                return self._cast(e, scope)
            case p.Slice():
                base, t = self.bits(e.base, scope)
                w = self.env.width(t)
                if not 0 <= e.lo <= e.hi < w:
                    raise TypeErrorP4(f"slice [{e.hi}:{e.lo}] of a bit<{w}> value")
                lo, m = e.lo, mask(e.hi - e.lo + 1)
                return (lambda f: (base(f) >> lo) & m), p.Bits(e.hi - e.lo + 1)
            case p.Call():
                return self.call(e, scope)
            case p.ListExpr() | p.Mask() | p.Range() | p.Default():
                raise TypeErrorP4(f"{type(e).__name__} is not a value here")
            case _:
                assert_never(e)

    def bits(self, e: p.Expr, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        fn, t = self.expr(e, scope)
        t = self.env.resolve(t)
        if not isinstance(t, p.Bits):
            raise TypeErrorP4(f"{e} must be a bit<W> value, not {t}")
        return fn, t

    def boolean(self, e: p.Expr, scope: dict[str, p.Type]) -> Fn:
        fn, t = self.expr(e, scope)
        if self.env.resolve(t) != BOOL:
            raise TypeErrorP4(f"{e} must be bool, not {t}")
        return fn

    def _path(self, name: str, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        if name in scope:
            return (lambda f: f[name]), scope[name]
        const = self.env.consts.get(name)
        if const is not None:
            return _const(const.value), const.type
        raise TypeErrorP4(f"unknown name {name}")

    def _member(self, e: p.Member, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        if isinstance(e.base, p.Path) and e.base.name not in scope and e.base.name in self.env.enum_types:
            key = f"{e.base.name}.{e.field}"
            if key not in self.env.enums:
                raise TypeErrorP4(f"unknown enum member {key}")
            return _const(self.env.enums[key]), p.TypeName(e.base.name)
        if isinstance(e.base, p.Call) and isinstance(e.base.target, p.Member) and e.base.target.field == "apply":
            apply, _ = self.call(e.base, scope)
            if e.field == "hit":
                return (lambda f: apply(f).hit), BOOL
            if e.field == "miss":
                return (lambda f: not apply(f).hit), BOOL
            raise TypeErrorP4(f"table apply result has no member {e.field}")
        base, t = self.expr(e.base, scope)
        ft = self.env.field_type(t, e.field)
        name = e.field
        return (lambda f: base(f).v[name]), ft

    def _unify(self, lt: p.Type, rt: p.Type, what: str) -> p.Type:
        lt, rt = self.env.resolve(lt), self.env.resolve(rt)
        if lt == INT:
            return rt
        if rt == INT or lt == rt:
            return lt
        raise TypeErrorP4(f"{what}: operands must have the same type, not {lt} and {rt}")

    def _bin(self, e: p.Bin, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        op = e.op
        if op in ("&&", "||"):
            lb, rb = self.boolean(e.left, scope), self.boolean(e.right, scope)
            if op == "&&":
                return (lambda f: lb(f) and rb(f)), BOOL
            return (lambda f: lb(f) or rb(f)), BOOL
        left, lt = self.expr(e.left, scope)
        right, rt = self.expr(e.right, scope)
        if op in ("<<", ">>"):
            w = self.env.width(lt)
            m = mask(w)
            if op == "<<":
                return (lambda f: (left(f) << right(f)) & m), lt
            return (lambda f: left(f) >> right(f)), lt
        if op == "++":
            wr = self.env.width(rt)
            return (lambda f: (left(f) << wr) | right(f)), p.Bits(self.env.width(lt) + wr)
        t = self._unify(lt, rt, op)
        if op in ("==", "!="):
            return ((lambda f: left(f) == right(f)) if op == "==" else (lambda f: left(f) != right(f))), BOOL
        cmp = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__}.get(op)
        if cmp is not None:
            return (lambda f: cmp(left(f), right(f))), BOOL
        if t == INT:
            raise TypeErrorP4(f"{op} on two untyped integers")
        m = mask(self.env.width(t))
        arith: dict[str, Callable[[int, int], int]] = {
            "+": lambda a, b: (a + b) & m, "-": lambda a, b: (a - b) & m, "*": lambda a, b: (a * b) & m,
            "&": lambda a, b: a & b & m, "|": lambda a, b: (a | b) & m, "^": lambda a, b: (a ^ b) & m,
            "|+|": lambda a, b: min(a + b, m), "|-|": lambda a, b: max(a - b, 0)}
        if op not in arith:
            raise TypeErrorP4(f"operator {op} is not in the executed subset")
        fn = arith[op]
        return (lambda f: fn(left(f), right(f))), t

    def _un(self, e: p.Un, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        if e.op == "!":
            b = self.boolean(e.operand, scope)
            return (lambda f: not b(f)), BOOL
        v, t = self.bits(e.operand, scope)
        m = mask(self.env.width(t))
        if e.op == "~":
            return (lambda f: ~v(f) & m), t
        if e.op == "-":
            return (lambda f: -v(f) & m), t
        raise TypeErrorP4(f"unary {e.op} is not in the executed subset")

    def _cast(self, e: p.Cast, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        target = self.env.resolve(e.type)
        v, t = self.expr(e.operand, scope)
        t = self.env.resolve(t)
        if target == BOOL:
            if t != p.Bits(1):
                raise TypeErrorP4(f"cast to bool from {t}: only bit<1> converts to bool")
            return (lambda f: v(f) == 1), target
        if not isinstance(target, p.Bits):
            raise TypeErrorP4(f"cast to {e.type} is not in the executed subset")
        if t == BOOL:
            if target.width != 1:
                raise TypeErrorP4(f"cast from bool to {target}: only bit<1> is allowed")
            return (lambda f: int(bool(v(f)))), target
        if not isinstance(t, p.Bits):
            raise TypeErrorP4(f"cast from {t} to {target}")
        m = mask(target.width)
        return (lambda f: v(f) & m), e.type

    # ---- calls -------------------------------------------------------------------------------

    def call(self, e: p.Call, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        target = e.target
        if isinstance(target, p.Path):
            if target.name in self.actions and not e.args:
                name = target.name
                actions = self.actions
                return (lambda f: actions[name](f, {})), p.TypeName("void")
            out = self.externs.function(self, target.name, e, scope)
            if out is None:
                raise TypeErrorP4(f"unknown function or action {target.name}")
            return out
        if not isinstance(target, p.Member):
            raise TypeErrorP4(f"cannot call {target}")
        method = target.field
        if method == "apply" and isinstance(target.base, p.Path) and target.base.name in self.tables:
            tname = target.base.name
            tables = self.tables
            return (lambda f: tables[tname](f)), p.TypeName("apply_result")
        obj, t = self.expr(target.base, scope)
        t = self.env.resolve(t)
        if method in ("isValid", "setValid", "setInvalid"):
            return self._validity(obj, t, method)
        if not isinstance(t, p.TypeName):
            raise TypeErrorP4(f"{target.base} has no methods")
        return self.externs.method(self, t, obj, method, e, scope)

    def _validity(self, obj: Fn, t: p.Type, method: str) -> tuple[Fn, p.Type]:
        if not isinstance(self.env.decl(t), p.HeaderType):
            raise TypeErrorP4(f"{method} needs a header, not {t}")
        if method == "isValid":
            return (lambda f: obj(f).valid), BOOL

        valid = method == "setValid"

        def set_(f: Frame) -> None:
            obj(f).valid = valid
        return set_, p.TypeName("void")

    # ---- l-values and statements -----------------------------------------------------------------

    def lvalue(self, e: p.Expr, scope: dict[str, p.Type]) -> tuple[Setter, p.Type]:
        if isinstance(e, p.Member):
            base, t = self.expr(e.base, scope)
            ft = self.env.field_type(t, e.field)
            name = e.field

            def set_field(f: Frame, v: Any) -> None:
                base(f).v[name] = v
            return set_field, ft
        if isinstance(e, p.Path) and e.name in scope:
            name = e.name

            def set_var(f: Frame, v: Any) -> None:
                f[name] = v
            return set_var, scope[e.name]
        raise TypeErrorP4(f"{e} cannot be assigned")

    def assign(self, target: p.Expr, value: p.Expr, scope: dict[str, p.Type]) -> StmtFn:
        setter, tt = self.lvalue(target, scope)
        get, vt = self.expr(value, scope)
        tt, vt = self.env.resolve(tt), self.env.resolve(vt)
        if vt == INT and isinstance(tt, p.Bits):
            m = mask(tt.width)
            return lambda f: setter(f, get(f) & m)
        if tt != vt:
            raise TypeErrorP4(f"assignment to {target}: {vt} must be {tt}")
        return lambda f: setter(f, get(f))

    def stmts(self, body: tuple[p.Stmt, ...], scope: dict[str, p.Type]) -> StmtFn:
        fns = [fn for s in body if (fn := self.stmt(s, scope)) is not None]

        def run(f: Frame) -> None:
            for fn in fns:
                fn(f)
        return run

    def stmt(self, s: p.Stmt, scope: dict[str, p.Type]) -> StmtFn | None:
        match s:
            case p.Assign():
                return self.assign(s.target, s.value, scope)
            case p.If():
                cond = self.boolean(s.cond, scope)
                then, orelse = self.stmts(s.then, scope), self.stmts(s.orelse, scope)

                def if_(f: Frame) -> None:
                    if cond(f):
                        then(f)
                    else:
                        orelse(f)
                return if_
            case p.CallStmt():
                fn, _ = self.call(s.call, scope)
                return fn
            case p.Exit():
                def exit_(f: Frame) -> None:
                    raise ExitSignal()
                return exit_
            case p.Comment():
                return None
            case _:
                assert_never(s)

    def new_obj(self, t: p.Type) -> Obj:
        """A zero-initialised (and, for headers, invalid) instance of a header or struct type."""
        d = self.env.decl(t)
        o = Obj(d, valid=False if isinstance(d, p.HeaderType) else None)
        for name, ft in d.fields:
            rt = self.env.resolve(ft)
            o.v[name] = self.new_obj(rt) if isinstance(rt, p.TypeName) and rt.name in self.env.decls else (
                False if rt == BOOL else 0)
        return o
