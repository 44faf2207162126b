"""Syntax tree → canonical .nfp text (``nfc fmt``); parse(print(tree)) gives the tree back.

Expressions are printed with the fewest parentheses the grammar's precedence allows.
"""

from __future__ import annotations

from decimal import Decimal
from typing import assert_never

from lang import ast

__all__ = ["print_expr", "print_module"]

# Binding strength of binary operators (higher binds tighter), as in nfp.lark.
_PREC = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
    "<<": 8, ">>": 8, "++": 9, "+": 10, "-": 10,
}
_UNARY = 11


def _type(t: ast.TypeRef) -> str:
    return "bool" if t.width is None else f"bit<{t.width}>"


def _prec(e: ast.Expr) -> int:
    if isinstance(e, ast.Binary):
        return _PREC[e.op]
    if isinstance(e, ast.Unary):
        return _UNARY
    return 99


def print_expr(e: ast.Expr) -> str:
    match e:
        case ast.IntLit():
            return _int(e)
        case ast.BoolLit():
            return "true" if e.value else "false"
        case ast.Quantity():
            return f"{_num(e.number)}{e.unit}"
        case ast.StringLit():
            return f'"{e.value}"'
        case ast.Name():
            return e.ident
        case ast.Member():
            return f"{_postfix(e.base)}.{e.field}"
        case ast.Slice():
            return f"{_postfix(e.base)}[{e.hi}:{e.lo}]"
        case ast.Index():
            return f"{_postfix(e.base)}[{print_expr(e.index)}]"
        case ast.Call():
            return f"{_postfix(e.callee)}({', '.join(print_expr(a) for a in e.args)})"
        case ast.Cast():
            return f"{_type(e.type)}({print_expr(e.operand)})"
        case ast.Unary():
            inner = print_expr(e.operand)
            return f"{e.op}{inner if _prec(e.operand) >= _UNARY else f'({inner})'}"
        case ast.Binary():
            p = _PREC[e.op]
            left = print_expr(e.left)
            right = print_expr(e.right)
            if _prec(e.left) < p:
                left = f"({left})"
            if _prec(e.right) <= p:  # operators associate to the left
                right = f"({right})"
            return f"{left} {e.op} {right}"
        case _:
            assert_never(e)


def _postfix(e: ast.Expr) -> str:
    s = print_expr(e)
    return s if isinstance(e, ast.Name | ast.Member | ast.Call | ast.Index | ast.Slice) else f"({s})"


def _int(e: ast.IntLit) -> str:
    if e.width == 32 and e.value >= 0:
        return ".".join(str((e.value >> s) & 0xFF) for s in (24, 16, 8, 0))
    if e.width == 48:
        return ":".join(f"{(e.value >> s) & 0xFF:02x}" for s in range(40, -1, -8))
    return str(e.value)


def _num(x: float) -> str:
    """A quantity's number as the grammar reads it back: digits and a point, never an
    exponent (``1.5e-07`` would not parse; the shortest repr keeps the value exact)."""
    return str(int(x)) if x == int(x) else format(Decimal(repr(x)), "f")


def _prop_value(v: ast.PropValue) -> str:
    match v:
        case ast.NameValue():
            return v.name
        case ast.NameList():
            return "[" + ", ".join(v.names) + "]"
        case ast.PortList():
            return _ports(v)
        case ast.LimitList():
            return "[" + ", ".join(f"{print_expr(a)}: {print_expr(b)}" for a, b in v.pairs) + "]"
        case _:
            return print_expr(v)


def _ports(p: ast.PortList) -> str:
    return "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in p.ranges) + "]"


def _block(b: ast.Block, n: int) -> list[str]:
    return ["{", *[line for s in b.stmts for line in _stmt(s, n + 1)], "  " * n + "}"]


def _joined(head: str, b: ast.Block, n: int) -> list[str]:
    lines = _block(b, n)
    return [head + lines[0], *lines[1:]]


def _inits(inits: tuple[ast.FieldInit, ...], n: int) -> list[str]:
    return ["  " * (n + 1) + f"{i.name} = {print_expr(i.value)};" for i in inits]


def _stmt(s: ast.Stmt, n: int) -> list[str]:
    pad = "  " * n
    match s:
        case ast.Assign():
            return [f"{pad}{print_expr(s.target)} = {print_expr(s.value)};"]
        case ast.Let():
            ty = f": {_type(s.type)}" if s.type else ""
            return [f"{pad}let {s.name}{ty} = {print_expr(s.value)};"]
        case ast.If():
            out = _joined(f"{pad}if ({print_expr(s.cond)}) ", s.then, n)
            if s.orelse is not None:
                tail = _joined("", s.orelse, n)
                out[-1] += " else " + tail[0]
                out += tail[1:]
            return out
        case ast.Lookup():
            out = [f"{pad}lookup {s.table} {{"]
            if s.hit is not None:
                var = f"({s.hit_var})" if s.hit_var else ""
                out += _joined(f"{pad}  hit{var} ", s.hit, n + 1)
            if s.miss is not None:
                out += _joined(f"{pad}  miss ", s.miss, n + 1)
            return [*out, f"{pad}}}"]
        case ast.Push():
            if not s.inits:
                return [f"{pad}push {s.header};"]
            return [f"{pad}push {s.header} {{", *_inits(s.inits, n), f"{pad}}}"]
        case ast.Pop():
            return [f"{pad}pop {s.header};"]
        case ast.Forward():
            return [f"{pad}forward({print_expr(s.port)});"]
        case ast.Drop():
            return [f"{pad}drop({s.reason});"]
        case ast.Punt():
            return [f"{pad}punt({s.reason});"]
        case ast.Insert():
            timeout = f" timeout {print_expr(s.timeout)}" if s.timeout is not None else ""
            return [f"{pad}insert {s.state} {{", *_inits(s.inits, n), f"{pad}}}{timeout};"]
        case ast.Remove():
            return [f"{pad}remove {s.state};"]
        case ast.Refresh():
            return [f"{pad}refresh {s.state};"]
        case ast.Verify():
            return [f"{pad}verify({print_expr(s.cond)}, {s.reason});"]
        case ast.ExprStmt():
            return [f"{pad}{print_expr(s.expr)};"]
        case ast.Extract():
            return [f"{pad}extract {s.header};"]
        case _:
            assert_never(s)


def _ptarget(t: ast.PTarget) -> str:
    return {"state": t.name, "accept": "accept", "drop": f"drop({t.name})", "punt": f"punt({t.name})"}[t.kind]


def _transition(tr: ast.Transition) -> list[str]:
    if tr.direct is not None:
        return [f"    transition {_ptarget(tr.direct)};"]
    out = [f"    transition select({', '.join(print_expr(e) for e in tr.exprs)}) {{"]
    for c in tr.cases:
        keys = "default" if c.keys is None else ", ".join(
            print_expr(k.value) + (f" &&& {print_expr(k.mask)}" if k.mask is not None else "") for k in c.keys)
        out.append(f"      {keys}: {_ptarget(c.target)};")
    return [*out, "    }"]


def _fields(fields: tuple[ast.FieldDecl, ...], n: int) -> list[str]:
    return ["  " * n + f"{f.name}: {_type(f.type)}{' secret' if f.secret else ''};" for f in fields]


def _props(props: tuple[ast.Property, ...]) -> list[str]:
    return [f"  {p.name} = {_prop_value(p.value)};" for p in props]


def _table(t: ast.TableDecl) -> list[str]:
    keys = [f"    {print_expr(k.expr)}: {k.kind}" + (f" as {k.alias}" if k.alias else "") + ";" for k in t.keys]
    out = [f"{'state' if t.is_state else 'table'} {t.name} {{", "  key {", *keys, "  }"]
    if t.values:
        out += ["  value {", *_fields(t.values, 2), "  }"]
    return [*out, *_props(t.props), "}"]


def _param(p: ast.FieldDecl | ast.HeaderParam) -> str:
    return f"{p.name}: {p.header_type}" if isinstance(p, ast.HeaderParam) else f"{p.name}: {_type(p.type)}"


def _decl(d: ast.Decl) -> list[str]:
    match d:
        case ast.Import():
            return [f'import "{d.path}";']
        case ast.ConstDecl():
            return [f"const {d.name}: {_type(d.type)} = {print_expr(d.value)};"]
        case ast.HeaderDecl():
            cs = f" checksum({d.checksum[0]})" if d.checksum else ""
            return [f"header {d.name}{cs} {{", *_fields(d.fields, 1), "}"]
        case ast.PacketDecl():
            return ["packet {", *[f"  {i.name}: {i.header_type};" for i in d.instances], "}"]
        case ast.MetadataDecl():
            return ["metadata {", *_fields(d.fields, 1), "}"]
        case ast.ParserDecl():
            out = [f"parser {d.name} {{"]
            for st in d.states:
                out += [f"  state {st.name} {{", *[x for s in st.stmts for x in _stmt(s, 2)],
                        *_transition(st.transition), "  }"]
            return [*out, "}"]
        case ast.TableDecl():
            return _table(d)
        case ast.RegisterDecl():
            return [f"register {d.name}: {_type(d.type)}[{_prop_value(d.size)}]{' monotonic' if d.monotonic else ''};"]
        case ast.CounterDecl():
            return [f"{d.kind} {d.name}[{_prop_value(d.size)}];"]
        case ast.ExternDecl():
            ret = f" -> {_type(d.ret)}" if d.ret else ""
            return [f"extern {d.name}({', '.join(_param(p) for p in d.params)}){ret} requires "
                    f"{', '.join(d.requires)};"]
        case ast.StageDecl():
            return _joined(f"stage {d.name} ", d.body, 0)
        case ast.PipelineDecl():
            when = [f"  when {print_expr(d.when)};"] if d.when is not None else []
            return [f"pipeline {d.name} {{", *_props(d.props), *when, "}"]
        case ast.PortsDecl():
            return [f"ports {d.name} = {_ports(d.ports)};"]
        case ast.TargetDecl():
            base = f" = {d.base}" if d.base else ""
            return [f"target {d.name}{base} {{", *_props(d.props), "}"]
        case ast.DeploymentDecl():
            shard = [f"  shard by {x.method}({', '.join(print_expr(k) for k in x.keys)});" for x in d.shards]
            return [f"deployment {d.name} {{", *_props(d.props), *shard, "}"]
        case _:
            assert_never(d)


def print_module(m: ast.Module) -> str:
    """Canonical text of a module (comments are not kept)."""
    blocks = ["\n".join(_decl(d)) for d in m.decls]
    return "\n\n".join(blocks) + "\n"
