"""Type checking of expressions (the part of ``lang.check`` that infers and checks types).

Rules: arithmetic and bitwise operators need equal widths (an integer literal takes the
other side's width and must fit it); comparisons give bool; ``++`` concatenates; shifts
keep the left width; slices and casts make widths explicit.  Every expression's type is
recorded in ``types`` by node identity.
"""

from __future__ import annotations

from lang import ast
from lang.diagnostics import Diagnostics, Span
from lang.symbols import COUNTER_METHODS, HASHES, STD_FIELDS, Scope, Symbols
from lang.types import MAX_WIDTH, Bits, Bool, IntLiteral, Type, Unknown, show

__all__ = ["ExprChecker"]


class ExprChecker:
    """Expression typing, shared by the declaration and statement checker."""

    def __init__(self, diags: Diagnostics) -> None:
        self.d = diags
        self.sym = Symbols()
        self.types: dict[int, Type] = {}
        self.broken: set[str] = set()  # skipped for syntax errors: no follow-up "unknown" errors

    def _width(self, t: ast.TypeRef) -> Type:
        if t.width is None:
            return Bool()
        if not 1 <= t.width <= MAX_WIDTH:
            self.d.error("E022", f"width must be between 1 and {MAX_WIDTH}, not {t.width}", t.span)
            return Bits(max(1, min(t.width, MAX_WIDTH)))
        return Bits(t.width)


    def _unknown(self, name: str, what: str, span: Span) -> None:
        if name in self.broken:
            return
        kind = self.sym.kind_of(name)
        if kind:
            self.d.error("E013", f"'{name}' is not a {what} (it is one of the {kind})", span)
        else:
            self.d.error("E011", f"unknown {what} '{name}'", span)

    # ---- expressions ---------------------------------------------------------------------

    def _expect(self, e: ast.Expr, want: Type | None, scope: Scope, want_bits: bool = False) -> Type:
        """Check ``e`` against an expected type; integer literals take the expected width."""
        t = self._expr(e, scope)
        if isinstance(t, Unknown) or isinstance(want, Unknown):
            return want if want is not None else t
        if isinstance(t, IntLiteral) and isinstance(want, Bits):
            self._fits(e, t.value, want.width)
            self.types[id(e)] = want
            return want
        if want_bits and isinstance(t, IntLiteral):
            return t
        if want_bits and not isinstance(t, Bits):
            self.d.error("E020", f"expected bit<N>, not {show(t)}", e.span)
        if want is not None and t != want and not (isinstance(t, IntLiteral) and isinstance(want, Bool)):
            self.d.error("E020", f"expected {show(want)}, not {show(t)}", e.span)
        elif want is not None and isinstance(t, IntLiteral):
            self.d.error("E020", "expected bool, not an integer literal", e.span)
        return t

    def _fits(self, e: ast.Expr, value: int, width: int) -> None:
        if value < 0 or value >= 1 << width:
            shown = str(value) if value.bit_length() < 80 else f"of {value.bit_length()} bits"
            self.d.error("E021", f"value {shown} does not fit in bit<{width}>", e.span)

    def _expr(self, e: ast.Expr, scope: Scope) -> Type:
        t = self._infer(e, scope)
        self.types[id(e)] = t
        return t

    def _infer(self, e: ast.Expr, scope: Scope) -> Type:
        match e:
            case ast.IntLit():
                if e.width is not None:
                    return Bits(e.width)
                return IntLiteral(e.value)
            case ast.BoolLit():
                return Bool()
            case ast.Quantity() | ast.StringLit():
                self.d.error("E020", "a quantity or string cannot be used in an expression", e.span)
                return Unknown()
            case ast.Name():
                return self._name(e, scope)
            case ast.Member():
                return self._member(e, scope)
            case ast.Slice():
                return self._slice(e, scope)
            case ast.Index():
                return self._index(e, scope)
            case ast.Call():
                return self._call(e, scope)
            case ast.Cast():
                return self._cast(e, scope)
            case ast.Unary():
                return self._unary(e, scope)
            case ast.Binary():
                return self._binary(e, scope)

    def _name(self, e: ast.Name, scope: Scope) -> Type:
        if e.ident in scope.locals:
            return scope.locals[e.ident]
        c = self.sym.consts.get(e.ident)
        if c is not None:
            return self._width(c.type)
        self._unknown(e.ident, "value", e.span) if self.sym.kind_of(e.ident) is None else \
            self.d.error("E013", f"'{e.ident}' is a {self.sym.kind_of(e.ident)[:-1]}, not a value",  # type: ignore[index]
                         e.span)
        return Unknown()

    def _member(self, e: ast.Member, scope: Scope) -> Type:
        base = e.base
        if not isinstance(base, ast.Name):
            self.d.error("E012", "fields are read from a header, 'meta', 'std' or a lookup result", e.span)
            return Unknown()
        n = base.ident
        if n in scope.hits:
            tbl = self.sym.tables.get(scope.hits[n])
            if tbl is None:
                return Unknown()
            f = next((v for v in tbl.values if v.name == e.field), None)
            if f is None:
                self.d.error("E012", f"table '{tbl.name}' has no value field '{e.field}'", e.span)
                return Unknown()
            return self._width(f.type)
        if n == "meta":
            mf = self.sym.metadata.get(e.field)
            if mf is None:
                self.d.error("E012", f"no metadata field '{e.field}'", e.span)
                return Unknown()
            return self._width(mf.type)
        if n == "std":
            if e.field not in STD_FIELDS:
                self.d.error("E012", f"no std field '{e.field}' (known: {', '.join(STD_FIELDS)})", e.span)
                return Bits(16)
            return Bits(STD_FIELDS[e.field])
        if n in self.sym.instances:
            h = self.sym.header_of(n)
            if h is None:
                return Unknown()
            hf = next((f for f in h.fields if f.name == e.field), None)
            if hf is None:
                self.d.error("E012", f"header '{n}' ({h.name}) has no field '{e.field}'", e.span)
                return Unknown()
            return self._width(hf.type)
        self._unknown(n, "header, 'meta', 'std' or lookup result", base.span)
        return Unknown()

    def _slice(self, e: ast.Slice, scope: Scope) -> Type:
        """``x[hi:lo]`` is bit<hi-lo+1>; after an error the slice is Unknown (its bounds may be
        absurd, e.g. ``x[1099511627776:0]``, and must not become a width)."""
        t = self._expr(e.base, scope)
        if isinstance(t, Unknown):
            return t
        if not isinstance(t, Bits):
            self.d.error("E020", f"only bit<N> can be sliced, not {show(t)}", e.span)
            return Unknown()
        if not (0 <= e.lo <= e.hi < t.width):
            bounds = f" [{e.hi}:{e.lo}]" if max(e.hi, e.lo) < 1 << 64 else ""
            self.d.error("E020", f"slice{bounds} must satisfy {t.width - 1} >= hi >= lo >= 0", e.span)
            return Unknown()
        return Bits(e.hi - e.lo + 1)

    def _index(self, e: ast.Index, scope: Scope) -> Type:
        if not (isinstance(e.base, ast.Name) and e.base.ident in self.sym.registers):
            self.d.error("E013", "only registers can be indexed", e.span)
            return Unknown()
        self._expect(e.index, None, scope, want_bits=True)
        return self._width(self.sym.registers[e.base.ident].type)

    def _cast(self, e: ast.Cast, scope: Scope) -> Type:
        want = self._width(e.type)
        t = self._expr(e.operand, scope)
        if isinstance(t, IntLiteral) and isinstance(want, Bits):
            self._fits(e.operand, t.value, want.width)
            self.types[id(e.operand)] = want
        elif isinstance(want, Bool) and not isinstance(t, Bool | Unknown):
            self.d.error("E020", f"cannot cast {show(t)} to bool (compare with 0 instead)", e.span)
        return want

    def _unary(self, e: ast.Unary, scope: Scope) -> Type:
        if e.op == "!":
            self._expect(e.operand, Bool(), scope)
            return Bool()
        t = self._expr(e.operand, scope)
        if isinstance(t, Unknown):
            return t
        if isinstance(t, IntLiteral):
            self.d.error("E020", f"'{e.op}' needs a sized operand: write bit<N>(value)", e.span)
            return Unknown()
        if not isinstance(t, Bits):
            self.d.error("E020", f"'{e.op}' needs bit<N>, not {show(t)}", e.span)
            return Bits(1)
        return t

    def _binary(self, e: ast.Binary, scope: Scope) -> Type:
        op = e.op
        if op in ("&&", "||"):
            self._expect(e.left, Bool(), scope)
            self._expect(e.right, Bool(), scope)
            return Bool()
        lt, rt = self._expr(e.left, scope), self._expr(e.right, scope)
        if isinstance(lt, Unknown) or isinstance(rt, Unknown):
            return Bool() if op in ("==", "!=", "<", "<=", ">", ">=") else Unknown()
        if op in ("<<", ">>"):
            if isinstance(lt, IntLiteral):
                self.d.error("E020", f"'{op}' needs a sized left operand: write bit<N>(value)", e.left.span)
                return Unknown()
            if not isinstance(lt, Bits) or not isinstance(rt, Bits | IntLiteral):
                self.d.error("E020", f"'{op}' needs bit<N> operands, not {show(lt)} and {show(rt)}", e.span)
            if isinstance(rt, IntLiteral):  # a literal shift amount is an unsigned 32-bit value
                self._fits(e.right, rt.value, 32)
                self.types[id(e.right)] = Bits(32)
            return lt
        if op == "++":
            if not isinstance(lt, Bits) or not isinstance(rt, Bits):
                self.d.error("E020", f"'++' needs sized bit<N> operands, not {show(lt)} and {show(rt)}", e.span)
                return Unknown()
            if lt.width + rt.width > MAX_WIDTH:
                self.d.error("E022", f"'++' of bit<{lt.width}> and bit<{rt.width}> is wider than bit<{MAX_WIDTH}>",
                             e.span)
                return Unknown()
            return Bits(lt.width + rt.width)
        t = self._unify(e, lt, rt)
        if op in ("==", "!="):
            return Bool()
        if not isinstance(t, Bits | IntLiteral):
            self.d.error("E020", f"'{op}' needs bit<N> operands, not {show(t)}", e.span)
            return Bool() if op in ("<", "<=", ">", ">=") else Bits(1)
        if op in ("<", "<=", ">", ">="):
            return Bool()
        if isinstance(t, IntLiteral):
            self.d.error("E020", f"'{op}' of two literals has no width: write bit<N>(value)", e.span)
            return Unknown()
        return t

    def _unify(self, e: ast.Binary, lt: Type, rt: Type) -> Type:
        if isinstance(lt, IntLiteral) and isinstance(rt, Bits):
            self._fits(e.left, lt.value, rt.width)
            self.types[id(e.left)] = rt
            return rt
        if isinstance(rt, IntLiteral) and isinstance(lt, Bits):
            self._fits(e.right, rt.value, lt.width)
            self.types[id(e.right)] = lt
            return lt
        if lt != rt and not (isinstance(lt, IntLiteral) and isinstance(rt, IntLiteral)):
            self.d.error("E020", f"operands of '{e.op}' must have the same type, not {show(lt)} and {show(rt)}",
                         e.span, notes=("cast one side, e.g. bit<32>(x), or slice it, e.g. x[15:0]",))
        return lt

    def _call(self, e: ast.Call, scope: Scope) -> Type:
        callee = e.callee
        if isinstance(callee, ast.Member) and isinstance(callee.base, ast.Name):
            return self._method(e, callee.base.ident, callee.field, scope)
        if not isinstance(callee, ast.Name):
            self.d.error("E013", "only named functions can be called", e.span)
            return Unknown()
        name = callee.ident
        if name in ("valid", "checksum_ok"):
            self._arity(e, 1)
            if e.args and not (isinstance(e.args[0], ast.Name) and e.args[0].ident in self.sym.instances):
                self.d.error("E013", f"{name}() takes a header", e.args[0].span)
            return Bool()
        if name == "csum_update":
            return self._csum_update(e, scope)
        if name in HASHES:
            if not e.args:
                self.d.error("E023", f"{name}() needs at least one field to hash", e.span)
            for a in e.args:
                t = self._expr(a, scope)
                if not isinstance(t, Bits | Unknown):
                    self.d.error("E020", f"{name}() hashes bit<N> values, not {show(t)}", a.span)
            return Bits(HASHES[name])
        ext = self.sym.externs.get(name)
        if ext is None:
            self._unknown(name, "function", callee.span)
            for a in e.args:
                self._expr(a, scope)
            return Unknown()
        if self._arity(e, len(ext.params)):
            for a, p in zip(e.args, ext.params, strict=True):
                if isinstance(p, ast.HeaderParam):
                    self._header_arg(a, p)
                else:
                    self._expect(a, self._width(p.type), scope)
        return self._width(ext.ret) if ext.ret else Bool()

    def _csum_update(self, e: ast.Call, scope: Scope) -> Type:
        """``csum_update(csum, old, new)``: RFC 1624 incremental update of an Internet checksum."""
        if not self._arity(e, 3):
            return Bits(16)
        self._expect(e.args[0], Bits(16), scope)
        old = self._expr(e.args[1], scope)
        if isinstance(old, Unknown):
            return Bits(16)
        if not isinstance(old, Bits) or old.width not in (16, 32):
            self.d.error("E020", f"csum_update() replaces a bit<16> or bit<32> value, not {show(old)}", e.args[1].span)
            return Bits(16)
        self._expect(e.args[2], old, scope)
        return Bits(16)

    def _header_arg(self, a: ast.Expr, p: ast.HeaderParam) -> None:
        inst = self.sym.instances.get(a.ident) if isinstance(a, ast.Name) else None
        if inst is None or inst.header_type != p.header_type:
            self.d.error("E020", f"argument '{p.name}' must be a header of type {p.header_type}", a.span)

    def _method(self, e: ast.Call, obj: str, method: str, scope: Scope) -> Type:
        c = self.sym.counters.get(obj)
        if c is None:
            self._unknown(obj, "counter or meter", e.callee.span)
            return Unknown()
        allowed = COUNTER_METHODS[c.kind]
        if method not in allowed:
            self.d.error("E012", f"{c.kind} '{obj}' has no method '{method}' (it has {', '.join(allowed)})", e.span)
            return Bits(2)
        if self._arity(e, 1):
            self._expect(e.args[0], None, scope, want_bits=True)
        return Bits(2) if c.kind == "meter" else Bool()

    def _arity(self, e: ast.Call, n: int) -> bool:
        if len(e.args) != n:
            self.d.error("E023", f"expected {n} argument{'s' if n != 1 else ''}, not {len(e.args)}", e.span)
            return False
        return True
