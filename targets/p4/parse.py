"""P4_16 text → ``targets.p4.syntax`` tree: the reader of what ``targets.p4.printer`` prints.

The switch model executes the P4 program it reads back from the build folder, not the tree
the generator held in memory, so what runs is exactly what a user deploys.  This module
reads that text: ``parse_program(print_program(tree)) == tree`` (see "Lossy printing"), and
printing the parsed tree gives the same text again.

The subset is the printer's language and nothing more (grammar: ``p4subset.lark``, Lark
LALR(1) with the contextual lexer):

* a preamble of ``//`` and ``#include`` / ``#define`` lines ended by a blank line
  (``Program.preamble``);
* declarations ``const``, ``typedef``, ``header`` (with annotations such as
  ``@controller_header("packet_in")``), ``struct``, extern and package instances
  (``Hash<bit<16>>(HashAlgorithm_t.CRC16) h;``, ``Pipeline(IngressParser(), ...) pipe;``), an
  instance may implement abstract methods in an initializer (``RegisterAction<...>(r) a = {
  void apply(inout bit<32> value, out bit<32> rv) {...} };``),
  ``parser`` (instances, then states) and ``control`` (instances, actions and tables, then
  ``apply``);
* ``//`` lines: before a declaration, action, table, state or instance they are its
  ``comment`` (several lines join with newlines); inside a body they are ``Comment``
  statements;
* tables with ``key = {...}`` (every key carries ``@name("...")``), ``actions = {...}``,
  ``[const] default_action = a();``, ``size = N;`` and optionally an idle-time property
  (``idle_timeout = true;``), in that order;
* statements: assignment, call, ``if``/``else`` with braces, ``exit;``;
* ``transition s;`` and ``transition select(...) {...}`` with keysets ``v``, ``v &&& m``,
  ``lo .. hi``, ``default`` and tuples ``(k1, k2)``;
* expressions with P4_16's precedence (spec §8, as p4c implements it): postfix
  ``.f`` ``[hi:lo]`` ``()``, then prefix ``! ~ -`` and casts, ``* / %``,
  ``+ - ++ |+| |-|``, ``<< >>``, ``&``, ``^``, ``|``, ``< <= > >=``, ``== !=``, ``&&``,
  ``||``; all binary operators associate to the left.  The printer parenthesises every
  operator operand, so precedence only decides text written by hand.

Names follow ``syntax.ref``: ``a.b.c`` is ``Member(Member(Path("a"), "b"), "c")``, a call's
target is the expression before the parentheses (``t.apply`` in ``t.apply().hit``).

Two lexical facts of the printer keep the grammar LALR(1): a ``<`` that opens type
arguments follows a name with no space (``Hash<bit<16>>``) while the operator has spaces
around it, and a parenthesised bare name is a cast (``(PortId_t)x``): the printer never
parenthesises a name.  A cast's type is ``bit<N>``, ``bool`` or a name without arguments.

Lossy printing: ``Const.base`` only shows for values above 9 (``8w0x1f`` vs ``8w31``);
``8w5`` reads back with base 16, the default.  ``true``/``false`` read back as
``Const(1 or 0, 0)`` with base 16.

Errors raise ``P4ParseError`` (a ``ValueError``) with the 1-based line and column and a
message naming what was expected there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import lark
from lark import Token, Transformer

from targets.p4 import syntax as p

__all__ = ["P4ParseError", "parse_program"]

GRAMMAR = Path(__file__).with_name("p4subset.lark")

_PREAMBLE_LINE = re.compile(r"^(//|#)")
_OPERATORS = frozenset(
    "OROR ANDAND EQ NE LT LE GT GE BOR XOR BAND SHL SHR PLUS MINUS CONCAT SATPLUS SATMINUS STAR SLASH PERCENT".split()
)
_DESCRIBE = {
    "NAME": "a name",
    "INT": "a number",
    "WIDTH_INT": "a number",
    "STRING": "a string",
    "COMMENT": "a comment",
    "_TLT": "'<' (no space before it)",
    "$END": "end of input",
}


class P4ParseError(ValueError):
    """Text the printer would not have printed; ``line`` and ``column`` are 1-based."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.message = message

    def __reduce__(self) -> tuple[type[P4ParseError], tuple[int, int, str]]:
        return type(self), (self.line, self.column, self.message)


def parse_program(text: str) -> p.Program:
    """Read a program printed by ``targets.p4.printer.print_program``."""
    preamble, body = _split_preamble(text)
    try:
        decls: list[p.Decl] = _lark().parse(body)  # type: ignore[assignment]  # built by _Build
    except lark.exceptions.UnexpectedInput as e:
        raise _error(e, body) from None
    return p.Program(preamble, tuple(decls))


# ---- driver -------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    # The transformer runs as LALR reduces: no parse tree, no recursion on deep nesting.  cache=True:
    # the LALR tables are kept between processes (lang/parser.py says how).
    return lark.Lark(GRAMMAR.read_text(), parser="lalr", lexer="contextual", transformer=_Build(),
                     maybe_placeholders=True, cache=True)


def _split_preamble(text: str) -> tuple[tuple[str, ...], str]:
    """The leading ``//`` / ``#`` lines up to a blank line, and the text with them blanked
    (newlines kept, so line numbers stay right).  Without the blank line they are not a
    preamble: ``//`` lines are then the first declaration's comment."""
    lines = text.split("\n")
    n = 0
    while n < len(lines) and _PREAMBLE_LINE.match(lines[n]):
        n += 1
    if n == 0 or (n < len(lines) and lines[n].strip()):
        return (), text
    return tuple(lines[:n]), "\n" * n + "\n".join(lines[n:])


def _error(e: lark.exceptions.UnexpectedInput, text: str) -> P4ParseError:
    expected = _accepted(e)
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            line, column = _end_of(text)
            found = "end of input"
        else:
            line, column = tok.line or e.line, tok.column or e.column
            found = repr(str(tok))
        return P4ParseError(line, column, f"expected {_expected(expected)}, found {found}")
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return P4ParseError(e.line, e.column, f"expected {_expected(expected)}, found {e.char!r}")
    line, column = _end_of(text)  # pragma: no cover - LALR reports the end as a $END token
    return P4ParseError(line, column, f"expected {_expected(expected)}, found end of input")


def _accepted(e: lark.exceptions.UnexpectedInput) -> set[str]:
    """The terminals the parser would have taken here (keywords included, which the
    contextual lexer folds into NAME and so leaves out of its own list)."""
    parser = getattr(e, "interactive_parser", None)
    if parser is not None:
        try:
            return set(parser.accepts())
        except lark.exceptions.LarkError:  # pragma: no cover - defensive
            pass
    return set(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())


def _end_of(text: str) -> tuple[int, int]:
    """The position just after the last non-blank character."""
    body = text.rstrip()
    lines = body.split("\n")
    return len(lines), len(lines[-1]) + 1


def _expected(terminals: set[str]) -> str:
    names = {t for t in terminals if not t.startswith("__IGNORE") and t != "$END"}
    ops = names & _OPERATORS
    if len(ops) <= 2:  # '>' closing type arguments, unary '-': not "an operator"
        ops = set()
    words = sorted({_describe(t) for t in names - ops})
    if ops:
        words.append("an operator")
    if "$END" in terminals:
        words.append("end of input")
    if not words:
        return "nothing more"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _describe(terminal: str) -> str:
    if terminal in _DESCRIBE:
        return _DESCRIBE[terminal]
    try:
        pattern = _lark().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    if isinstance(pattern, lark.lexer.PatternStr):
        return repr(pattern.value)
    return terminal.lower()


# ---- tokens -------------------------------------------------------------------------


def _number(tok: Token, digits: str) -> tuple[int, int]:
    """(value, base) of a literal: base 16 when written in hex or too small to tell."""
    if digits[:2].lower() == "0x":
        return int(digits, 16), 16
    try:
        value = int(digits, 10)
    except ValueError:  # more digits than Python converts
        raise P4ParseError(tok.line or 1, tok.column or 1, "expected a number of at most 4300 decimal digits") from None
    return value, 16 if value <= 9 else 10


def _decimal(tok: Token) -> int:
    return _number(tok, str(tok))[0]


@dataclass(frozen=True)
class _Comments:
    """The ``//`` lines before a declaration, with the position of the first."""

    text: str
    line: int
    column: int


def _text(comments: _Comments | None) -> str:
    return comments.text if comments else ""


def _comment(tok: Token) -> str:
    text = str(tok)[2:]
    text = text[1:] if text.startswith(" ") else text
    return text[:-1] if text.endswith("\r") else text


# ---- tree building ------------------------------------------------------------------


class _Build(Transformer[Token, Any]):
    """One method per grammar rule or alias; children arrive already built."""

    # declarations

    def start(self, c: list[p.Decl]) -> list[p.Decl]:
        return c

    def comments(self, c: list[Token]) -> _Comments:
        return _Comments("\n".join(_comment(t) for t in c), c[0].line or 1, c[0].column or 1)

    def const_decl(self, c: list[Any]) -> p.ConstDecl:
        comment, type_, name, value = c
        return p.ConstDecl(type_, str(name), value, _text(comment))

    def typedef_decl(self, c: list[Any]) -> p.Typedef:
        comment, type_, name = c
        if comment is not None:
            raise P4ParseError(comment.line, comment.column, "expected no comment before a typedef")
        return p.Typedef(type_, str(name))

    def header_decl(self, c: list[Any]) -> p.HeaderType:
        comment, rest = c[0], c[1:]
        notes = tuple(x for x in rest if isinstance(x, p.Annotation))
        name = next(x for x in rest if isinstance(x, Token))
        fields = tuple(x for x in rest if isinstance(x, tuple))
        return p.HeaderType(str(name), fields, _text(comment), notes)

    def annotation(self, c: list[Any]) -> p.Annotation:
        name, text = c
        return p.Annotation(str(name), None if text is None else str(text)[1:-1])

    def struct_decl(self, c: list[Any]) -> p.Struct:
        comment, name, *fields = c
        return p.Struct(str(name), tuple(fields), _text(comment))

    def field(self, c: list[Any]) -> tuple[str, p.Type]:
        type_, name = c
        return str(name), type_

    def instance(self, c: list[Any]) -> p.Instance:
        comment, type_, args, name, methods = c
        return p.Instance(type_, tuple(args or ()), str(name), _text(comment), methods or ())

    def initializer(self, c: list[p.Method]) -> tuple[p.Method, ...]:
        return tuple(c)

    def method_impl(self, c: list[Any]) -> p.Method:
        name, params, body = c
        return p.Method(str(name), tuple(params or ()), body)

    def parser_decl(self, c: list[Any]) -> p.Parser:
        comment, name, params, *rest = c
        locals_ = tuple(x for x in rest if isinstance(x, p.Instance))
        states = tuple(x for x in rest if isinstance(x, p.State))
        return p.Parser(str(name), tuple(params or ()), locals_, states, _text(comment))

    def control_decl(self, c: list[Any]) -> p.Control:
        comment, name, params, *locals_, apply = c
        return p.Control(str(name), tuple(params or ()), tuple(locals_), apply, _text(comment))

    def params(self, c: list[p.Param]) -> tuple[p.Param, ...]:
        return tuple(c)

    def param(self, c: list[Any]) -> p.Param:
        direction, type_, name = c
        return p.Param("" if direction is None else str(direction), type_, str(name))

    def action_decl(self, c: list[Any]) -> p.Action:
        comment, *notes, name, params, body = c
        return p.Action(str(name), tuple(params or ()), body, _text(comment), tuple(notes))

    def action_params(self, c: list[tuple[str, p.Type]]) -> tuple[tuple[str, p.Type], ...]:
        return tuple(c)

    def action_param(self, c: list[Any]) -> tuple[str, p.Type]:
        type_, name = c
        return str(name), type_

    def table_decl(self, c: list[Any]) -> p.Table:
        comment, *notes, name, keys, actions, (default, const), size, idle = c
        return p.Table(str(name), keys, actions, default, _decimal(size), _text(comment), const, idle or "",
                       tuple(notes))

    def table_idle(self, c: list[Token]) -> str:
        return str(c[0])

    def table_keys(self, c: list[p.Key]) -> tuple[p.Key, ...]:
        return tuple(c)

    def key_elem(self, c: list[Any]) -> p.Key:
        expr, match, name = c
        return p.Key(expr, str(match), str(name)[1:-1])

    def table_actions(self, c: list[Token]) -> tuple[str, ...]:
        return tuple(str(t) for t in c)

    def const_default(self, c: list[Token]) -> tuple[str, bool]:
        return str(c[0]), True

    def plain_default(self, c: list[Token]) -> tuple[str, bool]:
        return str(c[0]), False

    # parser states

    def pstate(self, c: list[Any]) -> p.State:
        comment, name, *body, (select, cases, nxt) = c
        return p.State(str(name), tuple(body), select, cases, nxt, _text(comment))

    def goto(self, c: list[Token]) -> tuple[tuple[p.Expr, ...], tuple[p.Case, ...], str]:
        return (), (), str(c[0])

    def select(self, c: list[Any]) -> tuple[tuple[p.Expr, ...], tuple[p.Case, ...], str]:
        exprs, *cases = c
        return exprs, tuple(cases), "accept"

    def select_case(self, c: list[Any]) -> p.Case:
        keys, nxt = c
        return p.Case(keys, str(nxt))

    def keyset_one(self, c: list[p.Expr]) -> tuple[p.Expr, ...]:
        return (c[0],)

    def keyset_tuple(self, c: list[p.Expr]) -> tuple[p.Expr, ...]:
        return tuple(c)

    def mask(self, c: list[p.Expr]) -> p.Mask:
        return p.Mask(c[0], c[1])

    def range(self, c: list[p.Expr]) -> p.Range:
        return p.Range(c[0], c[1])

    def default(self, c: list[Any]) -> p.Default:
        return p.Default()

    # statements

    def block(self, c: list[p.Stmt]) -> tuple[p.Stmt, ...]:
        return tuple(c)

    def assign(self, c: list[p.Expr]) -> p.Assign:
        return p.Assign(c[0], c[1])

    def call_stmt(self, c: list[p.Call]) -> p.CallStmt:
        return p.CallStmt(c[0])

    def if_stmt(self, c: list[Any]) -> p.If:
        cond, then, orelse = c
        return p.If(cond, then, (orelse,) if isinstance(orelse, p.If) else orelse or ())

    def exit_stmt(self, c: list[Any]) -> p.Exit:
        return p.Exit()

    def comment_stmt(self, c: list[Token]) -> p.Comment:
        return p.Comment(_comment(c[0]))

    # types

    def bits(self, c: list[Token]) -> p.Bits:
        return p.Bits(_decimal(c[0]))

    def bool(self, c: list[Any]) -> p.Bool:
        return p.Bool()

    def named_type(self, c: list[Any]) -> p.TypeName:
        name, *args = c
        return p.TypeName(str(name), tuple(args))

    def cast_name(self, c: list[Token]) -> p.TypeName:
        return p.TypeName(str(c[0]))

    # expressions

    def bin(self, c: list[Any]) -> p.Bin:
        left, op, right = c
        return p.Bin(str(op), left, right)

    def un(self, c: list[Any]) -> p.Un:
        op, operand = c
        return p.Un(str(op), operand)

    def cast(self, c: list[Any]) -> p.Cast:
        type_, operand = c
        return p.Cast(type_, operand)

    def member(self, c: list[Any]) -> p.Member:
        base, name = c
        return p.Member(base, str(name))

    def slice(self, c: list[Any]) -> p.Slice:
        base, hi, lo = c
        return p.Slice(base, _decimal(hi), _decimal(lo))

    def call(self, c: list[Any]) -> p.Call:
        target, args = c
        return p.Call(target, tuple(args or ()))

    def call_targs(self, c: list[Any]) -> p.Call:
        target, *types, args = c
        return p.Call(target, tuple(args or ()), tuple(types))

    def args(self, c: list[p.Expr]) -> tuple[p.Expr, ...]:
        return tuple(c)

    def path(self, c: list[Token]) -> p.Path:
        return p.Path(str(c[0]))

    def width_int(self, c: list[Token]) -> p.Const:
        tok = c[0]
        width_text, digits = str(tok).split("w", 1)
        width = _number(tok, width_text)[0]
        if width == 0:
            raise P4ParseError(tok.line or 1, tok.column or 1, "expected a width above 0 (0w... is not a literal)")
        value, base = _number(tok, digits)
        return p.Const(value, width, base)

    def int_lit(self, c: list[Token]) -> p.Const:
        value, base = _number(c[0], str(c[0]))
        return p.Const(value, -1, base)

    def lit_true(self, c: list[Any]) -> p.Const:
        return p.Const(1, 0)

    def lit_false(self, c: list[Any]) -> p.Const:
        return p.Const(0, 0)

    def list_expr(self, c: list[Any]) -> p.ListExpr:
        return p.ListExpr(tuple(c[0] or ()))
