"""A small C syntax tree for the server generator; ``targets.c.printer`` prints it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Assign",
    "Bin",
    "Block",
    "Call",
    "Cast",
    "Comment",
    "Cond",
    "Decl",
    "Define",
    "Expr",
    "ExprStmt",
    "Func",
    "Global",
    "Goto",
    "If",
    "Include",
    "Index",
    "Init",
    "Int",
    "Label",
    "Name",
    "Return",
    "Stmt",
    "Un",
    "Unit",
]


@dataclass(frozen=True, slots=True)
class Int:
    value: int
    suffix: str = "u"  # "u", "ull", ""


@dataclass(frozen=True, slots=True)
class Name:
    name: str


@dataclass(frozen=True, slots=True)
class Bin:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Un:
    op: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Call:
    func: str
    args: tuple[Expr, ...] = ()


@dataclass(frozen=True, slots=True)
class Index:
    base: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Cast:
    type: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Cond:
    cond: Expr
    then: Expr
    orelse: Expr


Expr = Int | Name | Bin | Un | Call | Index | Cast | Cond


@dataclass(frozen=True, slots=True)
class Decl:
    type: str
    name: str
    init: Expr | None = None


@dataclass(frozen=True, slots=True)
class Assign:
    target: Expr
    value: Expr


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True, slots=True)
class Return:
    value: Expr | None = None


@dataclass(frozen=True, slots=True)
class ExprStmt:
    expr: Expr


@dataclass(frozen=True, slots=True)
class Comment:
    text: str


@dataclass(frozen=True, slots=True)
class Block:
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Goto:
    label: str


@dataclass(frozen=True, slots=True)
class Label:
    name: str


Stmt = Decl | Assign | If | Return | ExprStmt | Comment | Block | Goto | Label


@dataclass(frozen=True, slots=True)
class Func:
    ret: str
    name: str
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    comment: str = ""
    static: bool = True


@dataclass(frozen=True, slots=True)
class Global:
    """A file-scope declaration, e.g. ``static const uint8_t NFC_X[4] = {1, 2, 3, 4};``."""

    text_type: str
    name: str
    init: str | tuple[Init, ...] = ""
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Init:
    """One element of a struct array initializer: designated fields, each with a comment."""

    fields: tuple[tuple[str, str], ...]  # (field, C expression)
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Define:
    """``#define NAME value``, with a comment after it; ``overridable``: only where NAME is not
    defined yet (a ``-DNAME=...`` of the build wins)."""

    name: str
    value: str
    comment: str = ""
    overridable: bool = False


@dataclass(frozen=True, slots=True)
class Include:
    header: str  # "<rte_ethdev.h>" or "\"nfc_rt.h\""


@dataclass(frozen=True, slots=True)
class Unit:
    comment: str
    items: tuple[Include | Define | Global | Func, ...]
