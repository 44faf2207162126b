"""Which names a C syntax tree uses (``names_used``); with it, parameters a function body
never reads get a ``(void)name;`` statement (``void_unused_params``), so that
``-Wextra``'s unused-parameter warning holds for every generated function: the exported
functions of ``nf.c`` keep the signatures ``nfc_rt.h`` declares even when the program has
nothing for them to do (no server stage, no server table).

Precondition: ``Name`` nodes hold C expressions over identifiers (``p->hdr[3]``), string
literals are double-quoted.  Example, with no server table::

    int nfc_bench_key(int table, const struct nfc_pkt *p, uint8_t *key) { return -1; }
    →  int nfc_bench_key(...) { (void)table; (void)p; (void)key; return -1; }
"""

from __future__ import annotations

import re
from typing import assert_never

from targets.c import syntax as c

__all__ = ["names_used", "void_unused_params"]

_IDENT = re.compile(r"[A-Za-z_]\w*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def void_unused_params(f: c.Func) -> c.Func:
    used = names_used(f.body)
    unused = [name for name in map(_param_name, f.params) if name not in used]
    if not unused:
        return f
    voids = tuple(c.ExprStmt(c.Cast("void", c.Name(n))) for n in unused)
    return c.Func(f.ret, f.name, f.params, voids + f.body, f.comment, f.static)


def _param_name(param: str) -> str:
    """``const struct nfc_pkt *p`` → ``p``."""
    names: list[str] = _IDENT.findall(param)
    return names[-1]


def _idents(text: str) -> set[str]:
    return set(_IDENT.findall(_STRING.sub("", text)))


def names_used(stmts: tuple[c.Stmt, ...]) -> set[str]:
    """The identifiers the statements read or write (declared names excluded)."""
    return {n for s in stmts for n in _stmt_names(s)}


def _stmt_names(s: c.Stmt) -> set[str]:
    match s:
        case c.Decl():
            return _expr_names(s.init) if s.init is not None else set()
        case c.Assign():
            return _expr_names(s.target) | _expr_names(s.value)
        case c.If():
            return _expr_names(s.cond) | names_used(s.then) | names_used(s.orelse)
        case c.Return():
            return _expr_names(s.value) if s.value is not None else set()
        case c.ExprStmt():
            return _expr_names(s.expr)
        case c.Block():
            return names_used(s.stmts)
        case c.Comment() | c.Goto() | c.Label():
            return set()
        case _:
            assert_never(s)


def _expr_names(e: c.Expr) -> set[str]:
    match e:
        case c.Int():
            return set()
        case c.Name():
            return _idents(e.name)
        case c.Bin():
            return _expr_names(e.left) | _expr_names(e.right)
        case c.Un():
            return _expr_names(e.operand)
        case c.Call():
            return {n for a in e.args for n in _expr_names(a)}
        case c.Index():
            return _expr_names(e.base) | _expr_names(e.index)
        case c.Cast():
            return _expr_names(e.operand)
        case c.Cond():
            return _expr_names(e.cond) | _expr_names(e.then) | _expr_names(e.orelse)
        case _:
            assert_never(e)
