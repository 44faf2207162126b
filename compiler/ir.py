"""The typed IR: a frozen tree, every node with the source span it came from.

Names (header instances, tables, stages) are plain strings resolved through the
``Program`` dictionaries, never back-pointers.  Every expression carries its type:
``width`` bits, or ``width == 0`` for bool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lang.diagnostics import Span as Span  # re-exported: generators take their spans from the IR

BOOL = 0  # width of a boolean expression

# ---- expressions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Const:
    value: int
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class HeaderField:
    inst: str
    field: str
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class MetaField:
    name: str
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class StdField:
    name: str
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Local:
    name: str
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Result:
    """A value field of the entry a lookup hit (bound by ``hit(var)``)."""

    table: str
    field: str
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Valid:
    inst: str
    span: Span
    width: int = BOOL


@dataclass(frozen=True, slots=True)
class ChecksumOk:
    inst: str
    span: Span
    width: int = BOOL


@dataclass(frozen=True, slots=True)
class HeaderRef:
    """A header instance passed to an extern (e.g. the outer IPv4 of esp_encrypt)."""

    inst: str
    span: Span
    width: int = BOOL


@dataclass(frozen=True, slots=True)
class RegRead:
    reg: str
    index: Expr
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Hash:
    alg: str
    args: tuple[Expr, ...]
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class CsumUpdate:
    """RFC 1624 eqn. 3: the Internet checksum ``csum`` after ``old`` (16 or 32 bits) became ``new``."""

    csum: Expr
    old: Expr
    new: Expr
    span: Span
    width: int = 16


@dataclass(frozen=True, slots=True)
class ExternCall:
    name: str
    args: tuple[Expr, ...]
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class CounterOp:
    """``c.count(i)`` (true) or ``m.execute(i)`` (colour: 0 green, 1 yellow, 2 red)."""

    obj: str
    method: str
    index: Expr
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Unary:
    op: str
    operand: Expr
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Expr
    right: Expr
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Slice:
    base: Expr
    hi: int
    lo: int
    width: int
    span: Span


@dataclass(frozen=True, slots=True)
class Cast:
    operand: Expr
    width: int
    span: Span


Expr = (
    Const | HeaderField | MetaField | StdField | Local | Result | Valid | ChecksumOk | HeaderRef | RegRead | Hash
    | CsumUpdate | ExternCall
    | CounterOp | Unary | Binary | Slice | Cast
)
LValue = HeaderField | MetaField | Local | RegRead

# ---- statements -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assign:
    target: LValue
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Lookup:
    table: str
    hit: tuple[Stmt, ...]
    miss: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Push:
    """Make a header valid, every field zero except those initialised."""

    inst: str
    inits: tuple[tuple[str, Expr], ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Pop:
    inst: str
    span: Span


@dataclass(frozen=True, slots=True)
class Forward:
    port: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str
    span: Span


@dataclass(frozen=True, slots=True)
class Punt:
    reason: str
    span: Span


@dataclass(frozen=True, slots=True)
class Insert:
    state: str
    values: tuple[tuple[str, Expr], ...]
    timeout: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class Remove:
    state: str
    span: Span


@dataclass(frozen=True, slots=True)
class Refresh:
    """Restart the idle timer of the current key's live entry of a state table (nothing if none)."""

    state: str
    span: Span


@dataclass(frozen=True, slots=True)
class Verify:
    cond: Expr
    reason: str
    span: Span


@dataclass(frozen=True, slots=True)
class Eval:
    """An expression evaluated for its effect (extern call, counter)."""

    expr: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Extract:
    inst: str
    span: Span


Stmt = Assign | If | Lookup | Push | Pop | Forward | Drop | Punt | Insert | Remove | Refresh | Verify | Eval | Extract

# ---- declarations -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    width: int
    span: Span
    secret: bool = False  # a table value marked ``secret``: the runtime never shows it


@dataclass(frozen=True, slots=True)
class HeaderType:
    name: str
    fields: tuple[Field, ...]
    checksum: str | None
    span: Span

    @property
    def bits(self) -> int:
        return sum(f.width for f in self.fields)


@dataclass(frozen=True, slots=True)
class Instance:
    name: str
    header: str
    span: Span


@dataclass(frozen=True, slots=True)
class PTarget:
    kind: str  # "state" | "accept" | "drop" | "punt"
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Case:
    values: tuple[tuple[int, int], ...]  # (value, mask) per select expression
    target: PTarget
    span: Span


@dataclass(frozen=True, slots=True)
class ParserState:
    name: str
    stmts: tuple[Stmt, ...]
    select: tuple[Expr, ...]
    cases: tuple[Case, ...]
    default: PTarget  # taken when no case matches (a parser without one drops: "parser_no_match")
    span: Span


@dataclass(frozen=True, slots=True)
class ParserGraph:
    name: str
    states: tuple[ParserState, ...]
    span: Span

    def state(self, name: str) -> ParserState:
        return next(s for s in self.states if s.name == name)


@dataclass(frozen=True, slots=True)
class Key:
    name: str  # control-plane name of the key field
    expr: Expr
    match: str  # exact | lpm | ternary | range
    span: Span


@dataclass(frozen=True, slots=True)
class Hints:
    """Traffic hints of a table; defaults mean "unknown, assume the worst"."""

    active: float = 1.0  # fraction of entries hot at once
    updates: float = 0.0  # entry updates per second
    traffic: float = 1.0  # fraction of the pipeline's packets that reach the lookup
    skew: float = 0.0  # Zipf exponent of entry popularity
    pin: str | None = None  # "switch" | "server": a user's override
    cache: bool = False  # may be split into a switch cache + full server table
    refresh: bool = True  # state only: a lookup hit restarts the entry's idle timer


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    is_state: bool
    keys: tuple[Key, ...]
    values: tuple[Field, ...]
    size: int
    hints: Hints
    timeout: float | None
    span: Span
    # state only: key fields (address, port) whose alloc_port port each entry holds until it expires
    holds_ports: tuple[int, int] | None = None
    # a switch cache's idle limits: (occupancy at least, seconds idle), the fullest first; None: the runtime's default
    idle_limits: tuple[tuple[float, float], ...] | None = None

    @property
    def key_bits(self) -> int:
        return sum(k.expr.width for k in self.keys)

    @property
    def value_bits(self) -> int:
        return sum(v.width for v in self.values)

    @property
    def match(self) -> str:
        """The table's overall match kind: the most general of its keys."""
        kinds = {k.match for k in self.keys}
        for kind in ("range", "ternary", "lpm"):
            if kind in kinds:
                return kind
        return "exact"


@dataclass(frozen=True, slots=True)
class Register:
    name: str
    width: int
    size: int
    span: Span
    monotonic: bool = False  # moved between servers, a cell only goes forward (compiler/shard.py)


@dataclass(frozen=True, slots=True)
class Counter:
    name: str
    kind: str  # counter | meter
    size: int
    span: Span


@dataclass(frozen=True, slots=True)
class Extern:
    name: str
    params: tuple[Field, ...]  # width 0: a header instance of type ``header_types[i]``
    header_types: tuple[str | None, ...]
    ret_width: int | None
    requires: tuple[str, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    ports: tuple[tuple[int, int], ...]
    parser: str
    stages: tuple[str, ...]
    when: Expr | None
    traffic: float
    span: Span

    def has_port(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.ports)


@dataclass(frozen=True, slots=True)
class PropVal:
    """A target or deployment property as written: a number (with unit), a name or a list."""

    name: str
    number: float | None
    unit: str
    text: str | None
    names: tuple[str, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Shard:
    """A deployment's ``shard by hash(keys)`` / ``range(key)``: the server a packet goes to at
    the cut, out of the deployment's servers in order (docs/language.md, "Sharding")."""

    method: str  # hash | range
    keys: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TargetDecl:
    name: str
    base: str | None
    props: tuple[PropVal, ...]
    span: Span
    shard: Shard | None = None  # a deployment's


@dataclass(frozen=True, slots=True)
class Program:
    file: str
    headers: dict[str, HeaderType]
    instances: tuple[Instance, ...]  # in deparse order
    metadata: tuple[Field, ...]
    parsers: dict[str, ParserGraph]
    tables: dict[str, Table]
    registers: dict[str, Register]
    counters: dict[str, Counter]
    externs: dict[str, Extern]
    stages: dict[str, Stage]
    pipelines: tuple[Pipeline, ...]
    targets: dict[str, TargetDecl]
    deployment: TargetDecl | None
    reasons: tuple[str, ...] = field(default=())

    def instance(self, name: str) -> Instance:
        return next(i for i in self.instances if i.name == name)

    def header_of(self, inst: str) -> HeaderType:
        return self.headers[self.instance(inst).header]

    def pipeline_of(self, stage: str) -> Pipeline:
        return next(p for p in self.pipelines if stage in p.stages)

    @property
    def first_pipeline_span(self) -> Span:
        """Where a diagnostic about the program's placement as a whole points: its first
        pipeline, else the file's first character."""
        return self.pipelines[0].span if self.pipelines else Span(self.file, 1, 1, 1, 1)
