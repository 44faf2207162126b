"""C syntax tree → text.  Every operand that is an operator expression is parenthesised."""

from __future__ import annotations

from typing import assert_never

from targets.c import syntax as c

__all__ = ["comment", "expr", "print_unit", "string_literal"]

IND = "    "


def expr(e: c.Expr) -> str:
    match e:
        case c.Int():
            return f"{e.value:#x}{e.suffix}" if e.value > 9 else f"{e.value}{e.suffix}"
        case c.Name():
            return e.name
        case c.Bin():
            return f"{_op(e.left)} {e.op} {_op(e.right)}"
        case c.Un():
            return f"{e.op}{_op(e.operand)}"
        case c.Call():
            return f"{e.func}({', '.join(expr(a) for a in e.args)})"
        case c.Index():
            return f"{_op(e.base)}[{expr(e.index)}]"
        case c.Cast():
            return f"({e.type}){_op(e.operand)}"
        case c.Cond():
            return f"{_op(e.cond)} ? {_op(e.then)} : {_op(e.orelse)}"
        case _:
            assert_never(e)


def _op(e: c.Expr) -> str:
    s = expr(e)
    return f"({s})" if isinstance(e, c.Bin | c.Un | c.Cast | c.Cond) else s


def _stmts(stmts: tuple[c.Stmt, ...], n: int) -> list[str]:
    return [line for s in stmts for line in _stmt(s, n)]


def _stmt(s: c.Stmt, n: int) -> list[str]:
    pad = IND * n
    match s:
        case c.Decl():
            init = f" = {expr(s.init)}" if s.init is not None else ""
            return [f"{pad}{s.type} {s.name}{init};"]
        case c.Assign():
            return [f"{pad}{expr(s.target)} = {expr(s.value)};"]
        case c.If():
            out = [f"{pad}if ({expr(s.cond)}) {{", *_stmts(s.then, n + 1)]
            if s.orelse:
                out += [f"{pad}}} else {{", *_stmts(s.orelse, n + 1)]
            return [*out, f"{pad}}}"]
        case c.Return():
            return [f"{pad}return{' ' + expr(s.value) if s.value is not None else ''};"]
        case c.ExprStmt():
            return [f"{pad}{expr(s.expr)};"]
        case c.Comment():
            return [f"{pad}{comment(s.text)}"]
        case c.Block():
            return [f"{pad}{{", *_stmts(s.stmts, n + 1), f"{pad}}}"]
        case c.Goto():
            return [f"{pad}goto {s.label};"]
        case c.Label():
            return [f"{s.name}:;"]
        case _:
            assert_never(s)


def _item(i: c.Include | c.Define | c.Global | c.Func) -> list[str]:
    match i:
        case c.Include():
            return [f"#include {i.header}"]
        case c.Define():
            line = f"#define {i.name} {i.value}" + (f" {comment(i.comment)}" if i.comment else "")
            return [f"#ifndef {i.name}", line, "#endif"] if i.overridable else [line]
        case c.Global() if isinstance(i.init, tuple):
            above = [comment(i.comment)] if i.comment else []
            rows = []
            for e in i.init:
                rows += [f"{IND}{comment(e.comment)}"] if e.comment else []
                rows += [f"{IND}{{", *[f"{IND * 2}.{f} = {v}," for f, v in e.fields], f"{IND}}},"]
            return [*above, f"{i.text_type} {i.name} = {{", *rows, "};"]
        case c.Global():
            above = [comment(i.comment)] if i.comment else []
            init = f" = {i.init}" if i.init else ""
            return [*above, f"{i.text_type} {i.name}{init};"]
        case c.Func():
            above = [comment(i.comment)] if i.comment else []
            static = "static " if i.static else ""
            params = ", ".join(i.params) or "void"
            return [*above, f"{static}{i.ret} {i.name}({params})", "{", *_stmts(i.body, 1), "}"]
        case _:
            assert_never(i)


def comment(text: str) -> str:
    """``/* text */`` that stays one comment whatever ``text`` holds (a source path with ``*/``
    or a line break must not end it and inject code)."""
    return "/* " + " ".join(text.replace("*/", "* /").splitlines()) + " */"


def string_literal(text: str) -> str:
    """A C string literal of ``text``: quotes, backslashes, ``?`` (trigraphs) and every byte outside
    printable ASCII escaped, so a file name cannot close the string and inject code."""
    out = []
    for b in text.encode():
        ch = chr(b)
        out.append(f"\\{ch}" if ch in '"\\?' else ch if 0x20 <= b < 0x7F else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def print_unit(u: c.Unit) -> str:
    parts = [comment(u.comment)]
    prev: type | None = None
    for item in u.items:
        if prev is not None and (type(item) is not prev or prev not in (c.Include, c.Define)):
            parts.append("")
        parts += _item(item)
        prev = type(item)
    return "\n".join(parts) + "\n"
