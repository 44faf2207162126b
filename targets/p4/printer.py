"""P4_16 syntax tree → text.  The printer owns indentation and parentheses: every
operand that is itself an operator expression is parenthesised, so P4's precedence rules
never decide the meaning of generated code."""

from __future__ import annotations

from typing import assert_never

from targets.p4 import syntax as p

__all__ = ["expr", "print_program", "type_"]

IND = "    "


def type_(t: p.Type) -> str:
    match t:
        case p.Bits():
            return f"bit<{t.width}>"
        case p.Bool():
            return "bool"
        case p.TypeName():
            return f"{t.name}<{', '.join(type_(a) for a in t.args)}>" if t.args else t.name
        case _:
            assert_never(t)


def _literal(value: int, base: int) -> str:
    return f"{value:#x}" if base == 16 and value > 9 else str(value)


def expr(e: p.Expr) -> str:
    match e:
        case p.Const():
            if e.width == 0:
                return "true" if e.value else "false"
            if e.width < 0:
                return _literal(e.value, e.base)
            return f"{e.width}w{_literal(e.value, e.base)}"
        case p.Path():
            return e.name
        case p.Member():
            return f"{_operand(e.base)}.{field_name(e.field)}"
        case p.Bin():
            return f"{_operand(e.left)} {e.op} {_operand(e.right)}"
        case p.Un():
            return f"{e.op}{_operand(e.operand)}"
        case p.Cast():
            return f"({type_(e.type)}){_operand(e.operand)}"
        case p.Slice():
            return f"{_operand(e.base)}[{e.hi}:{e.lo}]"
        case p.Call():
            targs = f"<{', '.join(type_(t) for t in e.type_args)}>" if e.type_args else ""
            callee = f"{_operand(e.target.base)}.{e.target.field}" if isinstance(e.target, p.Member) \
                else _operand(e.target)  # a method (t.apply, h.isValid): the architecture's name, as it is
            return f"{callee}{targs}({', '.join(expr(a) for a in e.args)})"
        case p.ListExpr():
            return "{" + ", ".join(expr(i) for i in e.items) + "}"
        case p.Mask():
            return f"{expr(e.value)} &&& {expr(e.mask)}"
        case p.Range():
            return f"{expr(e.lo)} .. {expr(e.hi)}"
        case p.Default():
            return "default"
        case _:
            assert_never(e)


def _operand(e: p.Expr) -> str:
    s = expr(e)
    return f"({s})" if isinstance(e, p.Bin | p.Un | p.Cast) else s


def _stmts(stmts: tuple[p.Stmt, ...], n: int) -> list[str]:
    return [line for s in stmts for line in _stmt(s, n)]


def _stmt(s: p.Stmt, n: int) -> list[str]:
    pad = IND * n
    match s:
        case p.Assign():
            return [f"{pad}{expr(s.target)} = {expr(s.value)};"]
        case p.If():
            out = [f"{pad}if ({expr(s.cond)}) {{", *_stmts(s.then, n + 1)]
            orelse = s.orelse
            while len(orelse) == 1 and isinstance(orelse[0], p.If):  # an else-if chain stays flat
                out += [f"{pad}}} else if ({expr(orelse[0].cond)}) {{", *_stmts(orelse[0].then, n + 1)]
                orelse = orelse[0].orelse
            if orelse:
                out += [f"{pad}}} else {{", *_stmts(orelse, n + 1)]
            return [*out, f"{pad}}}"]
        case p.CallStmt():
            return [f"{pad}{expr(s.call)};"]
        case p.Exit():
            return [f"{pad}exit;"]
        case p.Comment():  # one // line per line of the text (an empty comment is one empty line)
            return [f"{pad}// {line}" for line in s.text.splitlines() or [""]]
        case _:
            assert_never(s)


def _comment(text: str, n: int) -> list[str]:
    """One ``//`` line per line of ``text`` (every kind of line break), so no text ends a comment."""
    return [f"{IND * n}// {line}" for line in text.splitlines()] if text else []


def _fields(fields: tuple[tuple[str, p.Type], ...], n: int) -> list[str]:
    return [f"{IND * n}{type_(t)} {field_name(name)};" for name, t in fields]


def field_name(name: str) -> str:
    """A struct or header field as P4 spells it: a ``.nfp`` field named like a P4 keyword the
    grammar does not take as a name (``int``, ``bit``, ``default``; ``type`` and ``key`` it
    takes) gets ``__`` appended, which no ``.nfp`` name contains (check-names), so it meets
    no other field."""
    return f"{name}__" if name in p.P4_KEYWORDS and name not in p.P4_FIELD_KEYWORDS else name


def _instance(i: p.Instance, n: int) -> list[str]:
    head = f"{IND * n}{type_(i.type)}({', '.join(expr(a) for a in i.args)}) {i.name}"
    if not i.methods:
        return [*_comment(i.comment, n), f"{head};"]
    methods = [line for m in i.methods for line in (
        f"{IND * (n + 1)}void {m.name}({', '.join(_param(prm) for prm in m.params)}) {{", *_stmts(m.body, n + 2),
        f"{IND * (n + 1)}}}")]
    return [*_comment(i.comment, n), f"{head} = {{", *methods, f"{IND * n}}};"]


def _action(a: p.Action, n: int) -> list[str]:
    params = ", ".join(f"{type_(t)} {name}" for name, t in a.params)
    notes = [f"{IND * n}{x.source()}" for x in a.annotations]
    return [*_comment(a.comment, n), *notes, f"{IND * n}action {a.name}({params}) {{", *_stmts(a.body, n + 1),
            f"{IND * n}}}"]


def _table(t: p.Table, n: int) -> list[str]:
    pad = IND * n
    notes = [f"{pad}{x.source()}" for x in t.annotations]
    out = [*_comment(t.comment, n), *notes, f"{pad}table {t.name} {{", f"{pad}{IND}key = {{"]
    out += [f'{pad}{IND * 2}{expr(k.expr)} : {k.match} @name("{k.name}");' for k in t.keys]
    out += [f"{pad}{IND}}}", f"{pad}{IND}actions = {{"]
    out += [f"{pad}{IND * 2}{a};" for a in t.actions]
    const = "const " if t.const_default else ""
    out += [f"{pad}{IND}}}", f"{pad}{IND}{const}default_action = {t.default_action}();", f"{pad}{IND}size = {t.size};"]
    if t.idle:
        out.append(f"{pad}{IND}{t.idle} = true;")
    return [*out, f"{pad}}}"]


def _local(d: p.Instance | p.Action | p.Table, n: int) -> list[str]:
    match d:
        case p.Instance():
            return _instance(d, n)
        case p.Action():
            return _action(d, n)
        case p.Table():
            return _table(d, n)
        case _:
            assert_never(d)


def _state(s: p.State, n: int) -> list[str]:
    pad = IND * n
    out = [*_comment(s.comment, n), f"{pad}state {s.name} {{", *_stmts(s.body, n + 1)]
    if s.select:
        out.append(f"{pad}{IND}transition select({', '.join(expr(e) for e in s.select)}) {{")
        for c in s.cases:
            keys = expr(c.keys[0]) if len(c.keys) == 1 else "(" + ", ".join(expr(k) for k in c.keys) + ")"
            out.append(f"{pad}{IND * 2}{keys}: {c.next};")
        out.append(f"{pad}{IND}}}")
    else:
        out.append(f"{pad}{IND}transition {s.next};")
    return [*out, f"{pad}}}"]


def _decl(d: p.Decl) -> list[str]:
    match d:
        case p.HeaderType():
            notes = [a.source() for a in d.annotations]
            return [*_comment(d.comment, 0), *notes, f"header {d.name} {{", *_fields(d.fields, 1), "}"]
        case p.Struct():
            return [*_comment(d.comment, 0), f"struct {d.name} {{", *_fields(d.fields, 1), "}"]
        case p.Typedef():
            return [f"typedef {type_(d.type)} {d.name};"]
        case p.ConstDecl():
            return [*_comment(d.comment, 0), f"const {type_(d.type)} {d.name} = {expr(d.value)};"]
        case p.Instance():
            return _instance(d, 0)
        case p.Parser():
            locals_ = [line for i in d.locals for line in _instance(i, 1)]
            states = [line for s in d.states for line in [*_state(s, 1), ""]][:-1]
            return [*_comment(d.comment, 0), f"parser {d.name}(", *_params(d.params), ") {", *locals_, *states, "}"]
        case p.Control():
            locals_ = [line for x in d.locals for line in [*_local(x, 1), ""]]
            return [*_comment(d.comment, 0), f"control {d.name}(", *_params(d.params), ") {", *locals_,
                    f"{IND}apply {{", *_stmts(d.apply, 2), f"{IND}}}", "}"]
        case _:
            assert_never(d)


def _param(prm: p.Param) -> str:
    return f"{prm.direction + ' ' if prm.direction else ''}{type_(prm.type)} {prm.name}"


def _params(params: tuple[p.Param, ...]) -> list[str]:
    return [f"{IND * 2}{_param(prm)}{',' if i < len(params) - 1 else ''}" for i, prm in enumerate(params)]


def print_program(prog: p.Program) -> str:
    blocks = ["\n".join(_decl(d)) for d in prog.decls]
    return "\n".join(prog.preamble) + "\n\n" + "\n\n".join(blocks) + "\n"
