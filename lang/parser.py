"""Text → syntax tree: Lark LALR(1) over ``nfp.lark``, then a transformer to ``lang.ast``.

Syntax errors become E001 diagnostics.  To report several in one run, the parser blanks
out the top-level declaration holding an error (keeping line and column numbers) and
parses the rest again.  The same happens to a declaration with a malformed number (E004,
E021) or nested too deeply (E005).  Lexing, parsing and the tree transformation use no
recursion, so no input exhausts the Python stack here; ``lang.depth`` bounds the tree for
the passes after.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import lark
from lark import Token, Transformer_NonRecursive, v_args

from lang import ast
from lang.depth import too_deep
from lang.diagnostics import Diagnostics, Span
from lang.limits import MAX_DEPTH, MAX_LITERAL_BITS, MAX_SOURCE_BYTES
from lang.text import line_col, normalize

__all__ = ["MAX_DEPTH", "parse_text"]

GRAMMAR = Path(__file__).with_name("nfp.lark")
MAX_ERRORS = 50  # syntax errors reported per file before giving up
# ... or once this many characters were parsed in all (each error means parsing the file again)
_PARSE_BUDGET = 4 * MAX_SOURCE_BYTES
_TOP_KEYWORDS = (
    "import const header packet metadata parser table state register counter meter extern "
    "stage pipeline ports target deployment"
).split()
_TOP_LINE = re.compile(r"^(" + "|".join(_TOP_KEYWORDS) + r")\b", re.M)
_TOP_GLUED = re.compile(r"(?:" + "|".join(_TOP_KEYWORDS) + r")\w")
_TOKEN_NAMES = {
    "NAME": "a name",
    "INT": "a number",
    "SEMICOLON": "';'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COLON": "':'",
    "EQUAL": "'='",
    "COMMA": "','",
    "$END": "end of file",
}
_NUMBERS = frozenset({"INT", "HEXINT", "BININT", "IPV4", "MAC", "QUANTITY"})
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")
# 10**617 > 2**2048: a decimal of more digits is too large for any width, and converting it
# could hit Python's int-from-string limit (4300 digits) or take quadratic time
_MAX_DECIMAL_DIGITS = math.ceil(MAX_LITERAL_BITS * math.log10(2))


class SourceError(Exception):
    """A mistake in a declaration found while building its tree (a malformed number, too
    deep a nesting): reported like a syntax error, and the declaration is skipped."""

    def __init__(self, code: str, message: str, span: Span) -> None:
        super().__init__(message)
        self.code, self.message, self.span = code, message, span


@lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    # cache=True: the LALR tables are kept (a pickle in the temporary folder, keyed by the grammar, the options
    # and lark's version), so a process starts without building them again (0.7 s of `nfc check` otherwise)
    return lark.Lark(GRAMMAR.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True, cache=True)


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    """Terminal types of the keywords (``table``, ``hit``, ...): fixed strings ending in a word character."""
    return frozenset(t.name for t in _lark().terminals
                     if isinstance(t.pattern, lark.lexer.PatternStr) and _WORD_CHAR.match(t.pattern.value[-1]))


def parse_text(text: str, file: str, diags: Diagnostics) -> ast.Module:
    """Parse one file; every syntax error is added to ``diags`` and its declaration skipped."""
    text = normalize(text)
    broken: list[str] = []
    budget = _PARSE_BUDGET
    for _ in range(MAX_ERRORS):
        budget -= len(text)
        try:
            return replace(_parse(text, file), broken=tuple(broken))
        except lark.exceptions.UnexpectedInput as e:
            _report(e, text, file, diags)
            line, col = e.line, e.column
        except SourceError as e:
            diags.error(e.code, e.message, e.span)
            line, col = e.span.line, e.span.col
        blanked = _blank_declaration(text, line, col, broken)
        if blanked == text or budget < len(text):
            break
        text = blanked
    return ast.Module(file, (), tuple(broken))


def _parse(text: str, file: str) -> ast.Module:
    """One attempt: tokens (checked for glued words), tree, syntax tree, depth."""
    parser = _lark().parse_interactive(text)
    last: Token | None = None
    for last in parser.iter_parse():
        _check_separated(last, text, file)
    tree: lark.Tree[Token] = parser.feed_eof(last)  # type: ignore[no-untyped-call]
    try:
        decls: list[ast.Decl] = _ToAst(file).transform(tree).children
    except lark.exceptions.VisitError as e:
        raise e.orig_exc from None
    for decl in decls:
        span = too_deep(decl, MAX_DEPTH)
        if span is not None:
            raise SourceError("E005", f"statements and operators nest deeper than {MAX_DEPTH} levels here "
                              "(split the expression with 'let' or the code into stages)", span)
    return ast.Module(file, tuple(decls))


def _check_separated(tok: Token, text: str, file: str) -> None:
    """A keyword or number must not run into a name: ``tablefoo`` is a name, not ``table foo``
    (the contextual lexer would otherwise split it where a name cannot stand), and ``16Q`` is
    not ``16`` then ``Q``."""
    end = tok.end_pos
    if end is None or end >= len(text) or not _WORD_CHAR.match(text[end]):
        return
    if tok.type not in _NUMBERS and tok.type not in _keywords():
        return
    stop = end
    while stop < len(text) and _WORD_CHAR.match(text[stop]):
        stop += 1
    word = text[tok.start_pos or 0:stop]
    span = Span(file, tok.line or 1, tok.column or 1, tok.line or 1, (tok.column or 1) + len(word))
    if tok.type in _NUMBERS:
        raise SourceError("E004", f"malformed number '{word}' (a number cannot run into letters; "
                          "known units: see docs/language.md)", span)
    raise SourceError("E001", f"unexpected name '{word}' (a keyword '{tok}' must be followed by a space "
                      "or a symbol)", span)


def _report(e: lark.exceptions.UnexpectedInput, text: str, file: str, diags: Diagnostics) -> None:
    line, col = max(e.line, 1), max(e.column, 1)
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        pos = e.pos_in_stream or 0
        ch = text[pos] if pos < len(text) else "?"
        msg = f"unexpected character {ch!r}"
        width = 1
    elif isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        shown = "end of file" if tok.type == "$END" else repr(str(tok))
        msg = f"unexpected {shown}"
        expected = sorted({_describe(x) for x in e.expected if not x.startswith("__")})
        if expected and len(expected) <= 6:
            msg += f", expected {', '.join(expected)}"
        width = max(1, len(str(tok))) if tok.type != "$END" else 1
        if tok.type == "$END":  # just after the last token
            line, col = line_col(text, len(text.rstrip()))
    else:
        msg, width = "unexpected end of input", 1
    diags.error("E001", msg, Span(file, line, col, line, col + width))


def _describe(terminal: str) -> str:
    if terminal in _TOKEN_NAMES:
        return _TOKEN_NAMES[terminal]
    try:
        pattern = _lark().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    if isinstance(pattern, lark.lexer.PatternStr):
        return repr(pattern.value)
    return terminal.lower().replace("_", " ")


_DECL_NAME = re.compile(r"^(?:" + "|".join(_TOP_KEYWORDS) + r")\s*(\w+)")  # also "tablefoo" (E001): foo


def _blank_declaration(text: str, line: int, col: int, broken: list[str]) -> str:
    """Replace the top-level declaration around (line, col) with spaces, keeping newlines."""
    lines = text.split("\n")
    offset = sum(len(x) + 1 for x in lines[: max(line - 1, 0)]) + max(col - 1, 0)
    starts = [m.start() for m in _TOP_LINE.finditer(text)]
    if _TOP_GLUED.match(text, offset):  # "tablefoo {" (E001) starts a declaration too
        starts.append(offset)
    begin = max((s for s in starts if s <= offset), default=0)
    end = min((s for s in starts if s > offset), default=len(text))
    if end <= begin:
        return text
    named = _DECL_NAME.match(text[begin:end])
    if named:
        broken.append(named.group(1))
    chunk = re.sub(r"[^\n]", " ", text[begin:end])
    return text[:begin] + chunk + text[end:]


def _span(file: str, item: Any) -> Span:
    if isinstance(item, Token):
        return Span(file, item.line or 1, item.column or 1, item.end_line or 1, item.end_column or 1)
    meta = item
    if getattr(meta, "empty", True):
        return Span(file, 1, 1, 1, 1)
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


_UNITS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(.*)$")
_CHAIN_OPS = {
    "or_expr": "||",
    "and_expr": "&&",
    "bor_expr": "|",
    "bxor_expr": "^",
    "band_expr": "&",
    "concat_expr": "++",
}
_TOKEN_CHAINS = ("eq_expr", "rel_expr", "shift_expr", "add_expr")  # the operator is a token child


def _integer(tok: Token, file: str) -> int:
    """The value of an INT, HEXINT or BININT token; E004 for a malformed one (``007``, ``0x_``),
    E021 for one wider than any bit<N>."""
    text = str(tok).replace("_", "")
    span = _span(file, tok)
    base = {"0x": 16, "0b": 2}.get(text[:2], 10)
    digits = text[2:] if base != 10 else text
    if not digits:
        raise SourceError("E004", f"number '{tok}' has no digits after '{text[:2]}'", span)
    if base == 10:
        _decimal_digits(digits, span)
        if len(digits) > _MAX_DECIMAL_DIGITS:
            raise SourceError("E021", f"a number of {len(digits)} digits is wider than any bit<N> "
                              f"(at most {MAX_LITERAL_BITS} bits)", span)
    value = int(digits, base)
    if value.bit_length() > MAX_LITERAL_BITS:
        raise SourceError("E021", f"a number of {value.bit_length()} bits is wider than any bit<N> "
                          f"(at most {MAX_LITERAL_BITS} bits)", span)
    return value


def _decimal_digits(digits: str, span: Span) -> None:
    """Decimal digits may not start with 0 (``007``): C and P4 would read them as octal."""
    if len(digits) > 1 and digits[0] == "0":
        raise SourceError("E004", f"number '{digits}' has a leading zero (write {digits.lstrip('0') or '0'}; "
                          "octal is not supported, hexadecimal is 0x...)", span)


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive[Token, Any]):
    """Lark parse tree → ``lang.ast`` nodes (one method per grammar rule)."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    def sp(self, meta: Any) -> Span:
        return _span(self.file, meta)

    def number(self, tok: Token) -> int:
        return _integer(tok, self.file)

    # types
    def bit_type(self, meta: Any, c: list[Any]) -> ast.TypeRef:
        return ast.TypeRef(self.sp(meta), self.number(c[0]))

    def bool_type(self, meta: Any, c: list[Any]) -> ast.TypeRef:
        return ast.TypeRef(self.sp(meta), None)

    # literals
    def lit_int(self, meta: Any, c: list[Any]) -> ast.IntLit:
        return ast.IntLit(self.sp(meta), self.number(c[0]), None)

    def lit_ipv4(self, meta: Any, c: list[Any]) -> ast.IntLit:
        octets = str(c[0]).split(".")
        for o in octets:
            _decimal_digits(o, self.sp(meta))
        value = 0
        for o in octets:
            if int(o) > 255:
                raise SourceError("E021", "IPv4 address octets must be at most 255", self.sp(meta))
            value = (value << 8) | int(o)
        return ast.IntLit(self.sp(meta), value, 32)

    def lit_mac(self, meta: Any, c: list[Any]) -> ast.IntLit:
        return ast.IntLit(self.sp(meta), int(str(c[0]).replace(":", ""), 16), 48)

    def lit_quantity(self, meta: Any, c: list[Any]) -> ast.Quantity:
        """``16M``, ``2.5GHz``: the number is a float (``inf`` if absurdly long; lang.check bounds it)."""
        m = _UNITS.match(str(c[0]))
        assert m
        _decimal_digits(m.group(1).split(".")[0], self.sp(meta))
        return ast.Quantity(self.sp(meta), float(m.group(1)), m.group(2))

    def lit_true(self, meta: Any, c: list[Any]) -> ast.BoolLit:
        return ast.BoolLit(self.sp(meta), True)

    def lit_false(self, meta: Any, c: list[Any]) -> ast.BoolLit:
        return ast.BoolLit(self.sp(meta), False)

    def lit_string(self, meta: Any, c: list[Any]) -> ast.StringLit:
        return ast.StringLit(self.sp(meta), str(c[0])[1:-1])

    # expressions
    def name(self, meta: Any, c: list[Any]) -> ast.Name:
        return ast.Name(self.sp(meta), str(c[0]))

    def member(self, meta: Any, c: list[Any]) -> ast.Member:
        return ast.Member(self.sp(meta), c[0], str(c[1]))

    def slice(self, meta: Any, c: list[Any]) -> ast.Slice:
        return ast.Slice(self.sp(meta), c[0], self.number(c[1]), self.number(c[2]))

    def index(self, meta: Any, c: list[Any]) -> ast.Index:
        return ast.Index(self.sp(meta), c[0], c[1])

    def call(self, meta: Any, c: list[Any]) -> ast.Call:
        args = tuple(a for a in c[1:] if a is not None)
        return ast.Call(self.sp(meta), c[0], args)

    def cast(self, meta: Any, c: list[Any]) -> ast.Cast:
        return ast.Cast(self.sp(meta), c[0], c[1])

    def not_op(self, meta: Any, c: list[Any]) -> ast.Unary:
        return ast.Unary(self.sp(meta), "!", c[0])

    def inv_op(self, meta: Any, c: list[Any]) -> ast.Unary:
        return ast.Unary(self.sp(meta), "~", c[0])

    def neg_op(self, meta: Any, c: list[Any]) -> ast.Unary:
        return ast.Unary(self.sp(meta), "-", c[0])

    def __default__(self, data: Any, children: list[Any], meta: Any) -> Any:
        rule = str(data)
        if rule in _CHAIN_OPS:
            return self._fold(children, _CHAIN_OPS[rule])
        if rule in _TOKEN_CHAINS:
            return self._fold_tokens(children)
        return lark.Tree(data, children, meta)

    def _fold(self, children: list[Any], op: str) -> Any:
        result = children[0]
        for right in children[1:]:
            result = ast.Binary(result.span.merge(right.span), op, result, right)
        return result

    def _fold_tokens(self, children: list[Any]) -> Any:
        result = children[0]
        for i in range(1, len(children), 2):
            right = children[i + 1]
            result = ast.Binary(result.span.merge(right.span), str(children[i]), result, right)
        return result

    def expr_list(self, meta: Any, c: list[Any]) -> tuple[Any, ...]:
        return tuple(c)

    # statements
    def block(self, meta: Any, c: list[Any]) -> ast.Block:
        return ast.Block(self.sp(meta), tuple(c))

    def assign_stmt(self, meta: Any, c: list[Any]) -> ast.Assign:
        return ast.Assign(self.sp(meta), c[0], c[1])

    def let_stmt(self, meta: Any, c: list[Any]) -> ast.Let:
        return ast.Let(self.sp(meta), str(c[0]), c[1], c[2])

    def if_stmt(self, meta: Any, c: list[Any]) -> ast.If:
        orelse = c[2]
        if isinstance(orelse, ast.If):
            orelse = ast.Block(orelse.span, (orelse,))
        return ast.If(self.sp(meta), c[0], c[1], orelse)

    def lookup_stmt(self, meta: Any, c: list[Any]) -> ast.Lookup:
        hit, miss = c[1], c[2]
        return ast.Lookup(
            self.sp(meta),
            str(c[0]),
            _span(self.file, c[0]),
            hit[0] if hit else None,
            hit[1] if hit else None,
            miss,
        )

    def hit_arm(self, meta: Any, c: list[Any]) -> tuple[str | None, ast.Block]:
        return (str(c[0]) if c[0] is not None else None, c[1])

    def miss_arm(self, meta: Any, c: list[Any]) -> ast.Block:
        return c[0]  # type: ignore[no-any-return]

    def field_init(self, meta: Any, c: list[Any]) -> ast.FieldInit:
        return ast.FieldInit(self.sp(meta), str(c[0]), c[1])

    def push_stmt(self, meta: Any, c: list[Any]) -> ast.Push:
        return ast.Push(self.sp(meta), str(c[0]), tuple(c[1:]))

    def pop_stmt(self, meta: Any, c: list[Any]) -> ast.Pop:
        return ast.Pop(self.sp(meta), str(c[0]))

    def forward_stmt(self, meta: Any, c: list[Any]) -> ast.Forward:
        return ast.Forward(self.sp(meta), c[0])

    def drop_stmt(self, meta: Any, c: list[Any]) -> ast.Drop:
        return ast.Drop(self.sp(meta), str(c[0]))

    def punt_stmt(self, meta: Any, c: list[Any]) -> ast.Punt:
        return ast.Punt(self.sp(meta), str(c[0]))

    def insert_stmt(self, meta: Any, c: list[Any]) -> ast.Insert:
        inits = tuple(x for x in c[1:-1] if isinstance(x, ast.FieldInit))
        return ast.Insert(self.sp(meta), str(c[0]), inits, c[-1])

    def remove_stmt(self, meta: Any, c: list[Any]) -> ast.Remove:
        return ast.Remove(self.sp(meta), str(c[0]))

    def refresh_stmt(self, meta: Any, c: list[Any]) -> ast.Refresh:
        return ast.Refresh(self.sp(meta), str(c[0]))

    def verify_stmt(self, meta: Any, c: list[Any]) -> ast.Verify:
        return ast.Verify(self.sp(meta), c[0], str(c[1]))

    def call_stmt(self, meta: Any, c: list[Any]) -> ast.ExprStmt:
        return ast.ExprStmt(self.sp(meta), c[0])

    def extract_stmt(self, meta: Any, c: list[Any]) -> ast.Extract:
        return ast.Extract(self.sp(meta), str(c[0]))

    # parser
    def pt_state(self, meta: Any, c: list[Any]) -> ast.PTarget:
        return ast.PTarget(self.sp(meta), "state", str(c[0]))

    def pt_accept(self, meta: Any, c: list[Any]) -> ast.PTarget:
        return ast.PTarget(self.sp(meta), "accept", "")

    def pt_drop(self, meta: Any, c: list[Any]) -> ast.PTarget:
        return ast.PTarget(self.sp(meta), "drop", str(c[0]))

    def pt_punt(self, meta: Any, c: list[Any]) -> ast.PTarget:
        return ast.PTarget(self.sp(meta), "punt", str(c[0]))

    def select_key(self, meta: Any, c: list[Any]) -> ast.SelectKey:
        return ast.SelectKey(self.sp(meta), c[0], c[1] if len(c) > 1 else None)

    def sk_default(self, meta: Any, c: list[Any]) -> None:
        return None

    def sk_values(self, meta: Any, c: list[Any]) -> tuple[ast.SelectKey, ...]:
        return tuple(c)

    def select_case(self, meta: Any, c: list[Any]) -> ast.SelectCase:
        return ast.SelectCase(self.sp(meta), c[0], c[1])

    def trans_direct(self, meta: Any, c: list[Any]) -> ast.Transition:
        return ast.Transition(self.sp(meta), (), (), c[0])

    def trans_select(self, meta: Any, c: list[Any]) -> ast.Transition:
        return ast.Transition(self.sp(meta), c[0], tuple(c[1:]), None)

    def pstate(self, meta: Any, c: list[Any]) -> ast.ParserState:
        return ast.ParserState(self.sp(meta), str(c[0]), tuple(c[1:-1]), c[-1])

    def parser_decl(self, meta: Any, c: list[Any]) -> ast.ParserDecl:
        return ast.ParserDecl(self.sp(meta), str(c[0]), tuple(c[1:]))

    # declarations
    def field_decl(self, meta: Any, c: list[Any]) -> ast.FieldDecl:
        return ast.FieldDecl(self.sp(meta), str(c[0]), c[1])

    def checksum_clause(self, meta: Any, c: list[Any]) -> tuple[str, Span]:
        return (str(c[0]), _span(self.file, c[0]))

    def header_decl(self, meta: Any, c: list[Any]) -> ast.HeaderDecl:
        return ast.HeaderDecl(self.sp(meta), str(c[0]), tuple(c[2:]), c[1])

    def inst_decl(self, meta: Any, c: list[Any]) -> ast.Instance:
        return ast.Instance(self.sp(meta), str(c[0]), str(c[1]))

    def packet_decl(self, meta: Any, c: list[Any]) -> ast.PacketDecl:
        return ast.PacketDecl(self.sp(meta), tuple(c))

    def metadata_decl(self, meta: Any, c: list[Any]) -> ast.MetadataDecl:
        return ast.MetadataDecl(self.sp(meta), tuple(c))

    def key_field(self, meta: Any, c: list[Any]) -> ast.KeyField:
        alias = str(c[2]) if len(c) > 2 and c[2] is not None else None
        return ast.KeyField(self.sp(meta), c[0], str(c[1]), _span(self.file, c[1]), alias)

    def key_block(self, meta: Any, c: list[Any]) -> tuple[str, tuple[ast.KeyField, ...]]:
        return ("key", tuple(c))

    def value_block(self, meta: Any, c: list[Any]) -> tuple[str, tuple[ast.FieldDecl, ...]]:
        return ("value", tuple(c))

    def value_field(self, meta: Any, c: list[Any]) -> ast.FieldDecl:
        return ast.FieldDecl(self.sp(meta), str(c[0]), c[1], c[2] is not None)

    def property(self, meta: Any, c: list[Any]) -> ast.Property:
        return ast.Property(self.sp(meta), str(c[0]), c[1])

    property_any = property

    def pv_name(self, meta: Any, c: list[Any]) -> ast.NameValue:
        return ast.NameValue(self.sp(meta), str(c[0]))

    def name_list(self, meta: Any, c: list[Any]) -> ast.NameList:
        return ast.NameList(self.sp(meta), tuple(str(x) for x in c))

    def port_range(self, meta: Any, c: list[Any]) -> tuple[int, int]:
        lo = self.number(c[0])
        return (lo, self.number(c[1]) if len(c) > 1 else lo)

    def port_list(self, meta: Any, c: list[Any]) -> ast.PortList:
        return ast.PortList(self.sp(meta), tuple(c))

    def limit(self, meta: Any, c: list[Any]) -> tuple[ast.Quantity, ast.Quantity]:
        first, second = (self.lit_quantity(t, [t]) for t in c)  # a token is its own span
        return first, second

    def limit_list(self, meta: Any, c: list[Any]) -> ast.LimitList:
        return ast.LimitList(self.sp(meta), tuple(c))

    def _table(self, meta: Any, c: list[Any], is_state: bool) -> ast.TableDecl:
        keys: tuple[ast.KeyField, ...] = ()
        values: tuple[ast.FieldDecl, ...] = ()
        props: list[ast.Property] = []
        for item in c[1:]:
            if isinstance(item, ast.Property):
                props.append(item)
            elif item[0] == "key":
                keys += item[1]
            else:
                values += item[1]
        return ast.TableDecl(self.sp(meta), str(c[0]), is_state, keys, values, tuple(props))

    def table_decl(self, meta: Any, c: list[Any]) -> ast.TableDecl:
        return self._table(meta, c, False)

    def state_decl(self, meta: Any, c: list[Any]) -> ast.TableDecl:
        return self._table(meta, c, True)

    def register_decl(self, meta: Any, c: list[Any]) -> ast.RegisterDecl:
        return ast.RegisterDecl(self.sp(meta), str(c[0]), c[1], c[2], c[3] is not None)

    def counter_decl(self, meta: Any, c: list[Any]) -> ast.CounterDecl:
        return ast.CounterDecl(self.sp(meta), str(c[0]), c[1], "counter")

    def meter_decl(self, meta: Any, c: list[Any]) -> ast.CounterDecl:
        return ast.CounterDecl(self.sp(meta), str(c[0]), c[1], "meter")

    def param(self, meta: Any, c: list[Any]) -> ast.FieldDecl | ast.HeaderParam:
        if isinstance(c[1], Token):
            return ast.HeaderParam(self.sp(meta), str(c[0]), str(c[1]))
        return ast.FieldDecl(self.sp(meta), str(c[0]), c[1])

    def extern_decl(self, meta: Any, c: list[Any]) -> ast.ExternDecl:
        params = tuple(x for x in c[1:] if isinstance(x, ast.FieldDecl | ast.HeaderParam))
        rest = [x for x in c[1:] if x is not None and not isinstance(x, ast.FieldDecl | ast.HeaderParam)]
        ret = rest[0] if rest and isinstance(rest[0], ast.TypeRef) else None
        requires = tuple(str(x) for x in rest if isinstance(x, Token))
        return ast.ExternDecl(self.sp(meta), str(c[0]), params, ret, requires)

    def const_decl(self, meta: Any, c: list[Any]) -> ast.ConstDecl:
        return ast.ConstDecl(self.sp(meta), str(c[0]), c[1], c[2])

    def stage_decl(self, meta: Any, c: list[Any]) -> ast.StageDecl:
        return ast.StageDecl(self.sp(meta), str(c[0]), c[1])

    def when_clause(self, meta: Any, c: list[Any]) -> tuple[str, Any]:
        return ("when", c[0])

    def pipeline_decl(self, meta: Any, c: list[Any]) -> ast.PipelineDecl:
        props = tuple(x for x in c[1:] if isinstance(x, ast.Property))
        whens = [x[1] for x in c[1:] if isinstance(x, tuple)]
        return ast.PipelineDecl(self.sp(meta), str(c[0]), props, whens[0] if whens else None)

    def ports_decl(self, meta: Any, c: list[Any]) -> ast.PortsDecl:
        return ast.PortsDecl(self.sp(meta), str(c[0]), c[1])

    def target_decl(self, meta: Any, c: list[Any]) -> ast.TargetDecl:
        base = str(c[1]) if c[1] is not None else None
        return ast.TargetDecl(self.sp(meta), str(c[0]), base, tuple(c[2:]))

    def deployment_decl(self, meta: Any, c: list[Any]) -> ast.DeploymentDecl:
        return ast.DeploymentDecl(self.sp(meta), str(c[0]), tuple(x for x in c[1:] if isinstance(x, ast.Property)),
                                  tuple(x for x in c[1:] if isinstance(x, ast.ShardBy)))

    def shard_clause(self, meta: Any, c: list[Any]) -> ast.ShardBy:
        return ast.ShardBy(self.sp(meta), str(c[0]), tuple(c[1]))

    def import_decl(self, meta: Any, c: list[Any]) -> ast.Import:
        return ast.Import(self.sp(meta), str(c[0])[1:-1])
