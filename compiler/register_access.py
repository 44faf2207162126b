"""Can a block's reads and writes of a register run as one read-modify-write?

A switch keeps a register in a stateful ALU that a packet passes once: it reads one cell,
may write it back under a condition, and returns one value (TNA ``RegisterAction``).  A
``.nfp`` stage may read a register several times and write it once, with statements in
between.  ``one_access`` finds, for one register in a block, whether that sequence is one
read-modify-write and if so its parts, all expressed at the point where the ALU runs:

* ``at``: the statement of ``home`` (the innermost statement list holding every access)
  before which the ALU runs: the first one that accesses the register;
* ``index``: the one cell every access names (the same expression, whose operands nothing
  assigns between the first and the last access);
* ``write`` / ``new`` / ``guard``: the single write (a statement directly in ``home``), the
  value it writes and the condition under which the packet reaches it, both rewritten in
  terms of the values at ``at``: a ``RegRead`` of the register in them is its old value.
  Statements between ``at`` and the write may assign (the assignment is substituted), end
  the packet in one arm of an ``if`` (the condition joins the guard) or ``verify``; anything
  else that could end the packet there, or a value the write depends on that was assigned
  inside a branch, makes the sequence not one access.

Reads before the write return the old value and reads after it the new one, which the
generator keeps in a metadata copy.  ``guard`` and ``new`` use only constants, the packet's
fields, the old value and the operators a stateful ALU has (``OPS``); how much of an ALU they
take (``Shape``: fields read, widest operand, comparisons, operations) is measured here and
bounded by the switch profile (``salu_*`` resources, ``compiler/passes/capabilities.py``).  The
result is the same on every target; a target that executes register accesses one by one (the
server) needs none of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import ir
from compiler.analysis import stmt_exprs, walk_expr, walk_stmts
from compiler.irprint import print_expr

__all__ = ["OPS", "NotOne", "OneAccess", "Shape", "accessed_registers", "one_access"]

OPS = frozenset(("+", "-", "&", "|", "^", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "~", "!"))
_COMPARE = frozenset(("==", "!=", "<", "<=", ">", ">="))


@dataclass(frozen=True)
class Shape:
    """What the one read-modify-write asks of a stateful ALU (a switch profile's ``salu_*``
    resources bound each): the packet fields it reads, the widest operand (bits), the
    comparisons of its guard and the operations of its new value."""

    fields: tuple[str, ...] = ()
    widest: int = 0
    comparisons: int = 0
    operations: int = 0


@dataclass(frozen=True)
class OneAccess:
    reg: str
    index: ir.Expr
    home: tuple[ir.Stmt, ...]
    at: ir.Stmt
    write: ir.Assign | None
    new: ir.Expr | None  # None: no write
    guard: ir.Expr | None  # None: the write happens whenever the packet reaches ``at``
    shape: Shape = Shape()


@dataclass(frozen=True)
class NotOne:
    reg: str
    reason: str
    span: ir.Span


def accessed_registers(stmts: tuple[ir.Stmt, ...]) -> list[str]:
    """The registers read or written in ``stmts``, in order of first access."""
    seen: dict[str, None] = {}
    for s in walk_stmts(stmts):
        for x in _accesses((s,), shallow=True):
            seen.setdefault(x.reg, None)
    return list(seen)


def one_access(prog: ir.Program, stmts: tuple[ir.Stmt, ...], reg: str) -> OneAccess | NotOne:
    home = _home(stmts, reg)
    first = next(i for i, s in enumerate(home) if _touches(s, reg))
    last = max(i for i, s in enumerate(home) if _touches(s, reg))
    accesses = [x for x in _accesses(home[first:last + 1]) if x.reg == reg]
    index = accesses[0].index
    for x in accesses:
        if print_expr(x.index) != print_expr(index):
            return NotOne(reg, f"register '{reg}' accessed at two indices", x.span)
        if any(isinstance(y, ir.RegRead) for y in walk_expr(x.index)):
            return NotOne(reg, f"register '{reg}' indexed by a register", x.span)
    changed = _assigned(prog, home[first:last + 1])
    if changed is None or _vars(index) & changed:
        return NotOne(reg, f"register '{reg}' accessed at an index that may change between its accesses",
                      accesses[-1].span)
    writes = [s for s in walk_stmts(home[first:]) if isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead)
              and s.target.reg == reg]
    if not writes:
        return OneAccess(reg, index, home, home[first], None, None, None)
    if len(writes) > 1:
        return NotOne(reg, f"register '{reg}' written twice", writes[1].span)
    w = next((i for i, s in enumerate(home) if s is writes[0]), None)
    if w is None:
        return NotOne(reg, f"register '{reg}' written inside a branch", writes[0].span)
    found = _before_write(prog, home[first:w], reg)
    if isinstance(found, str):
        return NotOne(reg, found, writes[0].span)
    env, conds = found
    try:
        new = _subst(writes[0].value, env, reg)
    except _Unknown as e:
        return NotOne(reg, f"a write to register '{reg}' that depends on {e}", writes[0].span)
    guard = conds[0] if conds else None
    for c in conds[1:]:
        guard = ir.Binary("&&", guard, c, ir.BOOL, c.span)  # type: ignore[arg-type]
    return OneAccess(reg, index, home, home[first], writes[0], new, guard, _shape(new, conds))


def _shape(new: ir.Expr, conds: list[ir.Expr]) -> Shape:
    exprs = (new, *conds)
    fields = sorted({k for e in exprs for x in _operands(e) if (k := _var_key(x)) is not None})
    widest = max((x.width for e in exprs for x in _operands(e) if not isinstance(x, ir.RegRead)), default=0)
    compares = sum(isinstance(x, ir.Binary) and x.op in _COMPARE for c in conds for x in _operands(c))
    ops = sum(isinstance(x, ir.Binary | ir.Unary) for x in _operands(new))
    return Shape(tuple(fields), widest, compares, ops)


def _operands(e: ir.Expr) -> list[ir.Expr]:
    """``e`` and its subexpressions, not looking into a register's index (the ALU is given the
    cell, the index is not one of its operands); casts are free (they select bits)."""
    if isinstance(e, ir.RegRead):
        return [e]
    if isinstance(e, ir.Cast):
        return _operands(e.operand)
    out: list[ir.Expr] = [e]
    kids: tuple[ir.Expr, ...] = (e.left, e.right) if isinstance(e, ir.Binary) else \
        (e.operand,) if isinstance(e, ir.Unary) else ()
    for c in kids:
        out += _operands(c)
    return out


# ---- where the accesses are -------------------------------------------------------------------------


def _accesses(stmts: tuple[ir.Stmt, ...], shallow: bool = False) -> list[ir.RegRead]:
    """Every register access in ``stmts`` (reads and write targets), in program order;
    ``shallow``: in the statements themselves, not the blocks nested in them."""
    out: list[ir.RegRead] = []
    for s in (stmts if shallow else walk_stmts(stmts)):
        if isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead):
            out.append(s.target)
        out += [x for e in stmt_exprs(s) for x in walk_expr(e) if isinstance(x, ir.RegRead)]
    return out


def _touches(s: ir.Stmt, reg: str) -> bool:
    return any(x.reg == reg for x in _accesses((s,)))


def _home(stmts: tuple[ir.Stmt, ...], reg: str) -> tuple[ir.Stmt, ...]:
    """The innermost statement list whose statements hold every access of ``reg``."""
    touching = [s for s in stmts if _touches(s, reg)]
    if len(touching) == 1 and not any(x.reg == reg for x in _accesses(tuple(touching), shallow=True)):
        s = touching[0]
        arms = (s.then, s.orelse) if isinstance(s, ir.If) else (s.hit, s.miss) if isinstance(s, ir.Lookup) else ()
        inner = [a for a in arms if any(_touches(x, reg) for x in a)]
        if len(inner) == 1:
            return _home(inner[0], reg)
    return stmts


# ---- what changes between the accesses ----------------------------------------------------------------


def _var_key(e: ir.Expr) -> str | None:
    match e:
        case ir.HeaderField() | ir.MetaField() | ir.Local() | ir.Result() | ir.StdField():
            return print_expr(e).rsplit(":", 1)[0]
        case _:
            return None


def _vars(e: ir.Expr) -> set[str]:
    return {k for x in walk_expr(e) if (k := _var_key(x)) is not None} | (
        {"*pkt"} if any(isinstance(x, ir.HeaderField | ir.Valid | ir.StdField) for x in walk_expr(e)) else set())


def _assigned(prog: ir.Program, stmts: tuple[ir.Stmt, ...]) -> set[str] | None:
    """The variables ``stmts`` may assign ("*pkt": some header field, validity or the
    packet); None: something the analysis does not follow."""
    out: set[str] = set()
    for s in walk_stmts(stmts):
        match s:
            case ir.Assign() if not isinstance(s.target, ir.RegRead):
                out.add(_var_key(s.target) or "")
            case ir.Lookup():
                out |= {f"{s.table}[hit].{v.name}" for v in prog.tables[s.table].values}
            case ir.Push() | ir.Pop():
                out.add("*pkt")
            case ir.Forward():
                out.add("std.egress")
            case ir.Insert() | ir.Remove() | ir.Refresh() | ir.Extract():
                return None
        if any(isinstance(x, ir.ExternCall) for e in stmt_exprs(s) for x in walk_expr(e)):
            out.add("*pkt")
    return out


def _ends(stmts: tuple[ir.Stmt, ...]) -> bool:
    """Every path through ``stmts`` ends the packet (drop or punt)."""
    for s in stmts:
        if isinstance(s, ir.Drop | ir.Punt):
            return True
        if isinstance(s, ir.If) and _ends(s.then) and _ends(s.orelse):
            return True
    return False


def _may_end(stmts: tuple[ir.Stmt, ...]) -> bool:
    return any(isinstance(s, ir.Drop | ir.Punt | ir.Verify) for s in walk_stmts(stmts))


class _Unknown(Exception):
    """A value the substitution cannot express at the ALU's point."""


# an unknown variable's value in ``env``: why it is unknown
_BRANCH = "assigned in a branch or by a statement the stateful ALU cannot follow"


def _before_write(prog: ir.Program, stmts: tuple[ir.Stmt, ...],
                  reg: str) -> tuple[dict[str, ir.Expr | str], list[ir.Expr]] | str:
    """Walk the statements between the ALU's point and the write: the value each assigned
    variable then holds and the conditions the packet meets to reach the write, each in
    terms of the values at the ALU's point (a condition is rewritten where it stands)."""
    env: dict[str, ir.Expr | str] = {}  # a str: unknown, and why
    guards: list[ir.Expr] = []

    def forget(block: tuple[ir.Stmt, ...]) -> str | None:
        changed = _assigned(prog, block)
        if changed is None:
            return f"a write to register '{reg}' after a statement the stateful ALU cannot follow"
        for k in changed:
            env[k] = _BRANCH
        return None

    def cond(c: ir.Expr, holds: bool) -> None:
        c2 = _subst(c, env, reg)
        guards.append(c2 if holds else ir.Unary("!", c2, ir.BOOL, c.span))

    try:
        for s in stmts:
            match s:
                case ir.Assign() if isinstance(s.target, ir.MetaField | ir.Local):
                    value = s.value
                    key = _var_key(s.target)
                    assert key is not None
                    try:
                        env[key] = _subst(value, env, reg)
                    except _Unknown as e:
                        env[key] = f"computed from {e}"
                case ir.If() if _ends(s.then) and not _may_end(s.orelse):
                    cond(s.cond, False)
                    if (err := forget(s.orelse)) is not None:
                        return err
                case ir.If() if _ends(s.orelse) and not _may_end(s.then):
                    cond(s.cond, True)
                    if (err := forget(s.then)) is not None:
                        return err
                case ir.Verify():
                    cond(s.cond, True)
                case _ if _may_end((s,)):
                    return f"a write to register '{reg}' after a statement that may end the packet"
                case _:
                    if (err := forget((s,))) is not None:
                        return err
    except _Unknown as e:
        return f"a write to register '{reg}' under a condition on {e}"
    return env, guards


def _subst(e: ir.Expr, env: dict[str, ir.Expr | str], reg: str) -> ir.Expr:
    """``e`` in terms of the values at the ALU's point (raises ``_Unknown`` naming what
    cannot be expressed there)."""
    key = _var_key(e)
    if key is not None:
        v = env.get(key)
        if v is None and "*pkt" in env and isinstance(e, ir.HeaderField | ir.StdField):
            v = _BRANCH  # a header pushed or popped (or an extern) since: its fields and the length changed
        if isinstance(v, str):
            raise _Unknown(f"{key}, {v}")
        return e if v is None else v
    match e:
        case ir.Const():
            return e
        case ir.RegRead() if e.reg == reg:
            return e
        case ir.Binary() if e.op in OPS:
            return ir.Binary(e.op, _subst(e.left, env, reg), _subst(e.right, env, reg), e.width, e.span)
        case ir.Unary() if e.op in OPS:
            return ir.Unary(e.op, _subst(e.operand, env, reg), e.width, e.span)
        case ir.Cast() if e.width <= 32:
            return ir.Cast(_subst(e.operand, env, reg), e.width, e.span)
        case _:
            raise _Unknown(print_expr(e))
