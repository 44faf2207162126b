"""A small P4_16 syntax tree, shared by the TNA and v1model generators, the lint and the
switch model's executor.

Lowering builds these nodes; ``targets.p4.printer`` owns indentation, parentheses and
width-annotated literals; ``targets.p4.parse`` reads the printed text back into the same
tree.  Only the constructs the generators emit are here.  Names are structured: a dotted
reference is a ``Path`` followed by ``Member`` nodes (``ref("hdr.ipv4.ttl")`` builds one),
and types are ``Bits`` / ``Bool`` / ``TypeName`` nodes, never text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = [
    "P4_FIELD_KEYWORDS",
    "P4_KEYWORDS",
    "Action",
    "Annotation",
    "Assign",
    "Bin",
    "Bits",
    "Bool",
    "Call",
    "CallStmt",
    "Case",
    "Cast",
    "Comment",
    "Const",
    "ConstDecl",
    "Control",
    "Decl",
    "Default",
    "Exit",
    "Expr",
    "HeaderType",
    "If",
    "Instance",
    "Key",
    "ListExpr",
    "Mask",
    "Member",
    "Method",
    "Param",
    "Parser",
    "Path",
    "Program",
    "Range",
    "Slice",
    "State",
    "Stmt",
    "Struct",
    "Table",
    "Type",
    "TypeName",
    "Typedef",
    "Un",
    "bits",
    "children",
    "exprs_of",
    "ref",
    "stmts_of",
    "subexprs",
    "substitute",
]

# ---- types --------------------------------------------------------------------------------


# P4_16 v1.2.4 §6.4 "Keywords" (and the grammar's reserved words), plus core.p4 names the lexer
# treats as type names or reserved states
P4_KEYWORDS = frozenset((
    "abstract action actions apply bit bool break const continue control default else entries enum error "
    "exit extern false for header header_union if in inout int key list match_kind out package parser "
    "priority return select state string struct switch table this transition true tuple type typedef "
    "varbit value_set void packet_in packet_out NoAction accept reject verify").split())
# the keywords the grammar also takes as a field or member name (P4_16 ``name: nonTypeName |
# LIST``, ``nonTypeName: IDENTIFIER | APPLY | KEY | ACTIONS | STATE | ENTRIES | TYPE | PRIORITY``)
P4_FIELD_KEYWORDS = frozenset("apply key actions state entries type priority list".split())

@dataclass(frozen=True, slots=True)
class Bits:
    """``bit<width>``."""

    width: int


@dataclass(frozen=True, slots=True)
class Bool:
    pass


@dataclass(frozen=True, slots=True)
class TypeName:
    """A named type, possibly specialised: ``PortId_t``, ``headers_t``, ``Hash<bit<16>>``."""

    name: str
    args: tuple[Type, ...] = ()


Type = Bits | Bool | TypeName


def bits(width: int) -> Bits:
    return Bits(width)


# ---- expressions --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const:
    value: int
    width: int  # 0: bool literal (true/false); -1: untyped (arbitrary-precision) integer
    base: int = field(default=16, compare=False)  # how the printer writes the value (10 or 16): presentation only


@dataclass(frozen=True, slots=True)
class Path:
    """One identifier: a variable, parameter, constant, instance, action, type or enum name."""

    name: str


@dataclass(frozen=True, slots=True)
class Member:
    """``base.field``: a header or struct field, a header in a struct, a method, an enum member."""

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
    type: Type
    operand: Expr


@dataclass(frozen=True, slots=True)
class Slice:
    base: Expr
    hi: int
    lo: int


@dataclass(frozen=True, slots=True)
class Call:
    target: Expr  # Path("mark_to_drop"), Member(Path("t"), "apply"), a constructor call's type name
    args: tuple[Expr, ...] = ()
    type_args: tuple[Type, ...] = ()


@dataclass(frozen=True, slots=True)
class ListExpr:
    """``{a, b, c}``: a list of fields for hashing and checksums."""

    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Mask:
    """A select keyset ``value &&& mask``."""

    value: Expr
    mask: Expr


@dataclass(frozen=True, slots=True)
class Range:
    """A select keyset ``lo .. hi`` (inclusive)."""

    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Default:
    """The select keyset ``default``."""


Expr = Const | Path | Member | Bin | Un | Cast | Slice | Call | ListExpr | Mask | Range | Default


def ref(dotted: str) -> Expr:
    """``"hdr.ipv4.ttl"`` → ``Member(Member(Path("hdr"), "ipv4"), "ttl")``."""
    first, *rest = dotted.split(".")
    out: Expr = Path(first)
    for name in rest:
        out = Member(out, name)
    return out


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


def called(stmts: tuple[Stmt, ...]) -> Iterator[str]:
    """The names of what ``stmts`` call by name (``a();``: an action, a function), branches included."""
    for st in stmts:
        if isinstance(st, CallStmt) and isinstance(st.call.target, Path):
            yield st.call.target.name
        elif isinstance(st, If):
            yield from called(st.then)
            yield from called(st.orelse)

def children(e: Expr) -> tuple[Expr, ...]:
    """The expressions directly inside ``e``, in source order."""
    match e:
        case Member() | Slice():
            return (e.base,)
        case Bin():
            return (e.left, e.right)
        case Un() | Cast():
            return (e.operand,)
        case Call():
            return (e.target, *e.args)
        case ListExpr():
            return e.items
        case Mask():
            return (e.value, e.mask)
        case Range():
            return (e.lo, e.hi)
        case _:
            return ()


def _with_children(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """``e`` with ``children(e)`` replaced by ``kids``."""
    match e:
        case Member():
            return Member(kids[0], e.field)
        case Slice():
            return Slice(kids[0], e.hi, e.lo)
        case Bin():
            return Bin(e.op, kids[0], kids[1])
        case Un():
            return Un(e.op, kids[0])
        case Cast():
            return Cast(e.type, kids[0])
        case Call():
            return Call(kids[0], kids[1:], e.type_args)
        case ListExpr():
            return ListExpr(kids)
        case Mask():
            return Mask(kids[0], kids[1])
        case Range():
            return Range(kids[0], kids[1])
        case _:
            return e


def subexprs(e: Expr) -> Iterator[Expr]:
    """``e`` and every expression inside it, outermost first."""
    yield e
    for k in children(e):
        yield from subexprs(k)


def substitute(e: Expr, by: dict[Expr, Expr]) -> Expr:
    """``e`` with every subexpression that is a key of ``by`` replaced by its value."""
    if e in by:
        return by[e]
    kids = children(e)
    return _with_children(e, tuple(substitute(k, by) for k in kids)) if kids else e


def stmts_of(stmts: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of ``stmts``, branches included."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from stmts_of(s.then)
            yield from stmts_of(s.orelse)


def exprs_of(stmts: tuple[Stmt, ...]) -> Iterator[Expr]:
    """Every expression of ``stmts`` (targets, values, conditions, calls), branches included."""
    for s in stmts:
        match s:
            case Assign():
                yield from subexprs(s.target)
                yield from subexprs(s.value)
            case If():
                yield from subexprs(s.cond)
                yield from exprs_of(s.then)
                yield from exprs_of(s.orelse)
            case CallStmt():
                yield from subexprs(s.call)
            case _:
                pass


# ---- declarations -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Annotation:
    """``@name`` or ``@name("text")``."""

    name: str
    text: str | None = None

    def source(self) -> str:
        """The annotation as P4 source (and as p4c writes it into P4Info preambles)."""
        return f"@{self.name}" + (f'("{self.text}")' if self.text is not None else "")


@dataclass(frozen=True, slots=True)
class Param:
    direction: str  # "", "in", "out", "inout"
    type: Type
    name: str


@dataclass(frozen=True, slots=True)
class HeaderType:
    name: str
    fields: tuple[tuple[str, Type], ...]  # (name, type)
    comment: str = ""
    annotations: tuple[Annotation, ...] = ()


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[tuple[str, Type], ...]
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Typedef:
    type: Type
    name: str


@dataclass(frozen=True, slots=True)
class ConstDecl:
    type: Type
    name: str
    value: Expr
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Method:
    """An abstract method implemented where its extern is instantiated (P4_16 §10.3.1, "instantiations
    with initializers"): ``void apply(inout bit<32> value, out bit<32> rv) { ... }``."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Instance:
    """An extern or package instantiation: ``Hash<bit<16>>(HashAlgorithm_t.CRC16) h;``, with the
    abstract methods it implements (``RegisterAction<...>(r) a = { void apply(...) {...} };``)."""

    type: TypeName
    args: tuple[Expr, ...]
    name: str
    comment: str = ""
    methods: tuple[Method, ...] = ()


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    params: tuple[tuple[str, Type], ...]  # (name, type), directionless (control-plane data)
    body: tuple[Stmt, ...]
    comment: str = ""
    annotations: tuple[Annotation, ...] = ()  # @hidden: not in P4Info (p4c leaves it out)


@dataclass(frozen=True, slots=True)
class Key:
    expr: Expr
    match: str
    name: str  # @name annotation: the control-plane name of the key field
    prefix: bool = False  # a ternary key the control plane writes as a prefix (an .nfp lpm field)


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    keys: tuple[Key, ...]
    actions: tuple[str, ...]
    default_action: str  # an action without control-plane parameters
    size: int
    comment: str = ""
    const_default: bool = True
    idle: str = ""  # the architecture's idle-time property set to true (idle_timeout, support_timeout); "": none
    annotations: tuple[Annotation, ...] = ()  # @hidden: not in P4Info (p4c leaves it out)


@dataclass(frozen=True, slots=True)
class Case:
    keys: tuple[Expr, ...]  # one keyset per select expression: Const, Mask, Range or Default
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
    params: tuple[Param, ...]
    locals: tuple[Instance, ...]
    states: tuple[State, ...]
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Control:
    name: str
    params: tuple[Param, ...]
    locals: tuple[Instance | Action | Table, ...]
    apply: tuple[Stmt, ...]
    comment: str = ""


Decl = HeaderType | Struct | Typedef | ConstDecl | Instance | Parser | Control


@dataclass(frozen=True, slots=True)
class Program:
    preamble: tuple[str, ...]  # comment lines and #define / #include lines, in order
    decls: tuple[Decl, ...] = field(default=())
