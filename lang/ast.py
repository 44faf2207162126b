"""The syntax tree of a .nfp program: frozen, one node per construct, every node with its span.

The tree mirrors the source; names are plain strings resolved later by ``lang.check``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lang.diagnostics import Span

# ---- types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypeRef:
    span: Span
    width: int | None  # None means bool


# ---- expressions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IntLit:
    span: Span
    value: int
    width: int | None  # set for IPv4 (32) and MAC (48) literals


@dataclass(frozen=True, slots=True)
class BoolLit:
    span: Span
    value: bool


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number with a unit (``16M``, ``120s``, ``2%``, ``64GiB``); only in properties."""

    span: Span
    number: float
    unit: str


@dataclass(frozen=True, slots=True)
class StringLit:
    span: Span
    value: str


@dataclass(frozen=True, slots=True)
class Name:
    span: Span
    ident: str


@dataclass(frozen=True, slots=True)
class Member:
    span: Span
    base: Expr
    field: str


@dataclass(frozen=True, slots=True)
class Slice:
    span: Span
    base: Expr
    hi: int
    lo: int


@dataclass(frozen=True, slots=True)
class Index:
    span: Span
    base: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Call:
    span: Span
    callee: Expr
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Cast:
    span: Span
    type: TypeRef
    operand: Expr


@dataclass(frozen=True, slots=True)
class Unary:
    span: Span
    op: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary:
    span: Span
    op: str
    left: Expr
    right: Expr


Expr = IntLit | BoolLit | Quantity | StringLit | Name | Member | Slice | Index | Call | Cast | Unary | Binary
Literal = IntLit | BoolLit | Quantity | StringLit

# ---- statements -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    span: Span
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Assign:
    span: Span
    target: Expr
    value: Expr


@dataclass(frozen=True, slots=True)
class Let:
    span: Span
    name: str
    type: TypeRef | None
    value: Expr


@dataclass(frozen=True, slots=True)
class If:
    span: Span
    cond: Expr
    then: Block
    orelse: Block | None


@dataclass(frozen=True, slots=True)
class Lookup:
    span: Span
    table: str
    table_span: Span
    hit_var: str | None
    hit: Block | None
    miss: Block | None


@dataclass(frozen=True, slots=True)
class FieldInit:
    span: Span
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Push:
    span: Span
    header: str
    inits: tuple[FieldInit, ...]


@dataclass(frozen=True, slots=True)
class Pop:
    span: Span
    header: str


@dataclass(frozen=True, slots=True)
class Forward:
    span: Span
    port: Expr


@dataclass(frozen=True, slots=True)
class Drop:
    span: Span
    reason: str


@dataclass(frozen=True, slots=True)
class Punt:
    span: Span
    reason: str


@dataclass(frozen=True, slots=True)
class Insert:
    span: Span
    state: str
    inits: tuple[FieldInit, ...]
    timeout: Expr | None


@dataclass(frozen=True, slots=True)
class Remove:
    span: Span
    state: str


@dataclass(frozen=True, slots=True)
class Refresh:
    """Restart the idle timer of the current key's entry of a state table, if it has one."""

    span: Span
    state: str


@dataclass(frozen=True, slots=True)
class Verify:
    span: Span
    cond: Expr
    reason: str


@dataclass(frozen=True, slots=True)
class ExprStmt:
    span: Span
    expr: Expr


@dataclass(frozen=True, slots=True)
class Extract:
    span: Span
    header: str


Stmt = (Assign | Let | If | Lookup | Push | Pop | Forward | Drop | Punt | Insert | Remove | Refresh | Verify | ExprStmt
        | Extract)

# ---- declarations -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldDecl:
    span: Span
    name: str
    type: TypeRef
    secret: bool = False  # a table value marked ``secret`` (a key): never shown in messages


@dataclass(frozen=True, slots=True)
class HeaderDecl:
    span: Span
    name: str
    fields: tuple[FieldDecl, ...]
    checksum: tuple[str, Span] | None


@dataclass(frozen=True, slots=True)
class Instance:
    span: Span
    name: str
    header_type: str


@dataclass(frozen=True, slots=True)
class PacketDecl:
    span: Span
    instances: tuple[Instance, ...]


@dataclass(frozen=True, slots=True)
class MetadataDecl:
    span: Span
    fields: tuple[FieldDecl, ...]


@dataclass(frozen=True, slots=True)
class PTarget:
    span: Span
    kind: str  # "state" | "accept" | "drop" | "punt"
    name: str  # state name or drop reason; "" for accept


@dataclass(frozen=True, slots=True)
class SelectKey:
    span: Span
    value: Expr
    mask: Expr | None


@dataclass(frozen=True, slots=True)
class SelectCase:
    span: Span
    keys: tuple[SelectKey, ...] | None  # None: default
    target: PTarget


@dataclass(frozen=True, slots=True)
class Transition:
    span: Span
    exprs: tuple[Expr, ...]  # empty: direct transition
    cases: tuple[SelectCase, ...]
    direct: PTarget | None


@dataclass(frozen=True, slots=True)
class ParserState:
    span: Span
    name: str
    stmts: tuple[Stmt, ...]
    transition: Transition


@dataclass(frozen=True, slots=True)
class ParserDecl:
    span: Span
    name: str
    states: tuple[ParserState, ...]


@dataclass(frozen=True, slots=True)
class KeyField:
    span: Span
    expr: Expr
    kind: str
    kind_span: Span
    alias: str | None


@dataclass(frozen=True, slots=True)
class PortList:
    span: Span
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class NameList:
    span: Span
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NameValue:
    span: Span
    name: str


@dataclass(frozen=True, slots=True)
class LimitList:
    """``[85%: 1100s, 90%: 300s]``: pairs of quantities (a cache's idle limits by occupancy)."""

    span: Span
    pairs: tuple[tuple[Quantity, Quantity], ...]


PropValue = IntLit | BoolLit | Quantity | StringLit | NameValue | PortList | NameList | LimitList


@dataclass(frozen=True, slots=True)
class Property:
    span: Span
    name: str
    value: PropValue


@dataclass(frozen=True, slots=True)
class TableDecl:
    span: Span
    name: str
    is_state: bool
    keys: tuple[KeyField, ...]
    values: tuple[FieldDecl, ...]
    props: tuple[Property, ...]


@dataclass(frozen=True, slots=True)
class RegisterDecl:
    span: Span
    name: str
    type: TypeRef
    size: PropValue
    monotonic: bool = False  # a cell never goes back: a move between servers carries it forward


@dataclass(frozen=True, slots=True)
class CounterDecl:
    span: Span
    name: str
    size: PropValue
    kind: str  # "counter" | "meter"


@dataclass(frozen=True, slots=True)
class HeaderParam:
    """An extern parameter that names a header instance of the given header type."""

    span: Span
    name: str
    header_type: str


@dataclass(frozen=True, slots=True)
class ExternDecl:
    span: Span
    name: str
    params: tuple[FieldDecl | HeaderParam, ...]
    ret: TypeRef | None
    requires: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ConstDecl:
    span: Span
    name: str
    type: TypeRef
    value: Expr


@dataclass(frozen=True, slots=True)
class StageDecl:
    span: Span
    name: str
    body: Block


@dataclass(frozen=True, slots=True)
class PipelineDecl:
    span: Span
    name: str
    props: tuple[Property, ...]
    when: Expr | None


@dataclass(frozen=True, slots=True)
class PortsDecl:
    span: Span
    name: str
    ports: PortList


@dataclass(frozen=True, slots=True)
class TargetDecl:
    span: Span
    name: str
    base: str | None
    props: tuple[Property, ...]


@dataclass(frozen=True, slots=True)
class ShardBy:
    """``shard by hash(meta.a, ...)`` / ``shard by range(meta.a)``: which server gets a packet."""

    span: Span
    method: str
    keys: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class DeploymentDecl:
    span: Span
    name: str
    props: tuple[Property, ...]
    shards: tuple[ShardBy, ...] = ()  # the checker allows one


@dataclass(frozen=True, slots=True)
class Import:
    span: Span
    path: str


Decl = (
    Import
    | ConstDecl
    | HeaderDecl
    | PacketDecl
    | MetadataDecl
    | ParserDecl
    | TableDecl
    | RegisterDecl
    | CounterDecl
    | ExternDecl
    | StageDecl
    | PipelineDecl
    | PortsDecl
    | TargetDecl
    | DeploymentDecl
)


@dataclass(frozen=True, slots=True)
class Module:
    """One parsed file (imports not yet followed)."""

    file: str
    decls: tuple[Decl, ...]
    broken: tuple[str, ...] = ()  # names of declarations skipped for syntax errors
