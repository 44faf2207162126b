"""A small P4_16 syntax tree, shared by the TNA and v1model generators.

Lowering builds these nodes; ``targets.p4.printer`` owns indentation, parentheses and
width-annotated literals.  Only the constructs the generators emit are here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Action",
    "Assign",
    "Bin",
    "Call",
    "CallStmt",
    "Case",
    "Cast",
    "Comment",
    "Const",
    "ConstDecl",
    "Control",
    "Decl",
    "Exit",
    "Expr",
    "HeaderType",
    "If",
    "Instance",
    "Key",
    "ListExpr",
    "Member",
    "Parser",
    "Path",
    "Program",
    "Slice",
    "State",
    "Stmt",
    "Struct",
    "Table",
    "Typedef",
    "Un",
]


# ---- expressions --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const:
    value: int
    width: int  # 0: bool literal (true/false); -1: untyped integer


@dataclass(frozen=True, slots=True)
class Path:
    """A name or dotted path: ``hdr.ipv4.ttl``, ``ig_tm_md.ucast_egress_port``."""

    name: str


@dataclass(frozen=True, slots=True)
class Member:
    base: Expr
    field: str


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
class Cast:
    type: str  # "bit<16>", "PortId_t", "bool"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Slice:
    base: Expr
    hi: int
    lo: int


@dataclass(frozen=True, slots=True)
class Call:
    target: Expr  # Path("h.get"), Member(Path("t"), "apply")
    args: tuple[Expr, ...] = ()
    type_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ListExpr:
    """``{a, b, c}``: a list of fields for hashing and checksums."""

    items: tuple[Expr, ...]


Expr = Const | Path | Member | Bin | Un | Cast | Slice | Call | ListExpr

# ---- statements ---------------------------------------------------------------------------


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
class CallStmt:
    call: Call


@dataclass(frozen=True, slots=True)
class Exit:
    pass


@dataclass(frozen=True, slots=True)
class Comment:
    text: str


Stmt = Assign | If | CallStmt | Exit | Comment

# ---- declarations -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderType:
    name: str
    fields: tuple[tuple[str, str], ...]  # (name, type)
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[tuple[str, str], ...]
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Typedef:
    type: str
    name: str


@dataclass(frozen=True, slots=True)
class ConstDecl:
    type: str
    name: str
    value: Expr
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Instance:
    """An extern or package instantiation: ``Hash<bit<16>>(HashAlgorithm_t.CRC16) h;``."""

    type: str
    args: tuple[Expr, ...]
    name: str
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, type), directionless (control-plane data)
    body: tuple[Stmt, ...]
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Key:
    expr: Expr
    match: str
    name: str  # @name annotation: the control-plane name of the key field


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    keys: tuple[Key, ...]
    actions: tuple[str, ...]
    default_action: str
    size: int
    comment: str = ""
    const_default: bool = True


@dataclass(frozen=True, slots=True)
class Case:
    keys: tuple[str, ...]  # printed keyset items ("0x0800", "16w0x8100 &&& 16w0xffff", "default")
    next: str


@dataclass(frozen=True, slots=True)
class State:
    name: str
    body: tuple[Stmt, ...]
    select: tuple[Expr, ...] = ()
    cases: tuple[Case, ...] = ()
    next: str = "accept"  # the transition when there is no select
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Parser:
    name: str
    params: tuple[str, ...]
    locals: tuple[Instance, ...]
    states: tuple[State, ...]
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Control:
    name: str
    params: tuple[str, ...]
    locals: tuple[Instance | Action | Table, ...]
    apply: tuple[Stmt, ...]
    comment: str = ""


Decl = HeaderType | Struct | Typedef | ConstDecl | Instance | Parser | Control


@dataclass(frozen=True, slots=True)
class Program:
    preamble: tuple[str, ...]  # comment lines and #define / #include lines, in order
    decls: tuple[Decl, ...] = field(default=())
