"""``targets.p4.parse`` reads back exactly what ``targets.p4.printer`` prints.

* every generated switch program (five examples x TNA / v1model x Tofino-1 / Tofino-2),
  compared with the tree the generator printed and with the file it wrote;
* hand-written trees for the constructs the examples lack (masks, ranges, tuple keysets,
  every operator, comments everywhere, type arguments, package instances);
* P4 precedence on unparenthesised text, which the printer never writes;
* errors: ``P4ParseError`` with the line and column, never a Lark exception.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from compiler.manifest import plan_from_json
from nfc.build import placed_and_plan
from targets.p4 import syntax as p
from targets.p4.parse import P4ParseError, parse_program
from targets.p4.printer import print_program
from targets.tofino import generator
from tests.support import ROOT, compile_file

EXAMPLES = sorted((ROOT / "examples").glob("*.nfp"))
CHIPS = {"tofino": "tofino+dpdk", "tofino2": "tofino2+dpdk"}
FILES = ("switch_tna", "switch_v1model")


def canonical(x: Any) -> Any:
    """The tree as its text shows it: the printer writes a literal's base only for values
    above 9 (``8w0x1f`` / ``8w31``), so ``8w5`` reads back with the default base 16."""
    if isinstance(x, p.Const):
        return dataclasses.replace(x, base=16) if x.value <= 9 else x
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x)(**{f.name: canonical(getattr(x, f.name)) for f in dataclasses.fields(x)})
    if isinstance(x, tuple):
        return tuple(canonical(i) for i in x)
    return x


def round_trip(tree: p.Program) -> p.Program:
    text = print_program(tree)
    back = parse_program(text)
    assert print_program(back) == text
    return back


# ---- the generated programs ---------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], tuple[p.Program, str]]:
    """(example, chip, artifact) → (the tree the switch generator printed, the file it wrote).

    Runs the registered ``tna`` generator (what ``nfc build`` runs for the switch) and
    records the trees it hands to ``print_program``."""
    out: dict[tuple[str, str, str], tuple[p.Program, str]] = {}
    for ex in EXAMPLES:
        for chip, flag in CHIPS.items():
            c = compile_file(str(ex), flag)
            folder = tmp_path_factory.mktemp(f"{ex.stem}_{chip}")
            trees: list[p.Program] = []

            def record(tree: p.Program, trees: list[p.Program] = trees) -> str:
                trees.append(tree)
                return print_program(tree)

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(generator, "print_program", record)
                placed, plan = placed_and_plan(c)
                artifacts = generator.emit(placed, plan_from_json(plan), folder)
            by_text = {print_program(t): t for t in trees}
            for key in FILES:
                text = (folder / artifacts[key]).read_text()
                assert text in by_text, f"{key} is not the text of a printed tree"
                out[ex.stem, chip, key] = by_text[text], text
    return out


CASES = [(ex.stem, chip, key) for ex in EXAMPLES for chip in CHIPS for key in FILES]


@pytest.mark.parametrize(("example", "chip", "artifact"), CASES)
def test_generated_program_reads_back_as_its_tree(
    generated: dict[tuple[str, str, str], tuple[p.Program, str]], example: str, chip: str, artifact: str
) -> None:
    tree, text = generated[example, chip, artifact]
    back = parse_program(text)
    assert back == canonical(tree)
    assert print_program(back) == text
    assert parse_program(print_program(back)) == back


def test_tofino2_preamble_reads_back(generated: dict[tuple[str, str, str], tuple[p.Program, str]]) -> None:
    tree, text = generated[EXAMPLES[0].stem, "tofino2", "switch_tna"]
    back = parse_program(text)
    assert back.preamble == tree.preamble
    assert any("t2na" in line for line in back.preamble)


# ---- hand-written trees -------------------------------------------------------------

A, B, C = p.ref("hdr.a.x"), p.ref("meta.b"), p.Path("c")
BINARY = ["*", "/", "%", "+", "-", "++", "|+|", "|-|", "<<", ">>", "&", "^", "|",
          "<", "<=", ">", ">=", "==", "!=", "&&", "||"]
PORT = p.TypeName("PortId_t")


def _program(*decls: p.Decl, preamble: tuple[str, ...] = ("// test",)) -> p.Program:
    return p.Program(preamble, decls)


def _control(*stmts: p.Stmt, locals_: tuple[p.Instance | p.Action | p.Table, ...] = ()) -> p.Control:
    return p.Control("C", (p.Param("inout", p.TypeName("headers_t"), "hdr"),), locals_, stmts)


def _assign(value: p.Expr) -> p.Control:
    return _control(p.Assign(A, value))


def _everything() -> p.Program:
    """One program with every construct of ``syntax`` the printer writes."""
    keysets = (
        p.Case((p.Const(0x800, 16),), "ipv4"),
        p.Case((p.Mask(p.Const(0x86DD, 16), p.Const(0xFFFF, 16)),), "ipv6"),
        p.Case((p.Range(p.Const(0, 16), p.Const(15, 16, 10)),), "low"),
        p.Case((p.Mask(p.Bin("+", A, B), p.Const(0xFF, 8)),), "sum"),
        p.Case((p.Cast(p.Bits(16), B),), "cast"),
        p.Case((p.Default(),), "accept"),
    )
    tuples = (
        p.Case((p.Const(1, 1), p.Mask(p.Const(0x10, 8), p.Const(0xF0, 8))), "a"),
        p.Case((p.Range(p.Const(1, -1), p.Const(100, -1, 10)), p.Default()), "b"),
        p.Case((p.Default(), p.Default()), "reject"),
    )
    parser = p.Parser(
        "IngressParser",
        (p.Param("", p.TypeName("packet_in"), "pkt"), p.Param("out", p.TypeName("headers_t"), "hdr"),
         p.Param("inout", p.TypeName("metadata_t"), "meta"), p.Param("in", p.Bits(9), "port")),
        (p.Instance(p.TypeName("Checksum"), (), "csum", "a parser local"),
         p.Instance(p.TypeName("Register", (p.Bits(32), p.Bits(8))), (p.Const(16, -1, 10),), "r")),
        (
            p.State("start", (p.Comment("first"), p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref("hdr.eth"),))),
                              p.Comment(""), p.Comment("  indented")),
                    (p.ref("hdr.eth.type"),), keysets, comment="the start state\nsecond line"),
            p.State("two", (), (p.Call(p.ref("pkt.lookahead"), (), (p.Bits(8),)), p.Slice(B, 3, 0)), tuples),
            p.State("ipv4", (p.Assign(p.ref("meta.ok"), p.Call(p.ref("csum.verify"))),), next="accept"),
            p.State("empty", ()),
        ),
        comment="the parser",
    )
    action = p.Action("set", (("port", p.Bits(9)), ("mac", p.Bits(48))),
                      (p.Comment("set the port"), p.Assign(p.ref("meta.port"), p.Path("port"))), "an action")
    keys = (p.Key(A, "exact", "a_x"), p.Key(p.Slice(B, 31, 16), "lpm", "b_hi"), p.Key(C, "ternary", "c"),
            p.Key(p.ref("meta.size"), "range", "size"))
    table = p.Table("t", keys, ("set", "nop"), "nop", 1024, "a table\n\nafter a blank line")
    bare = p.Table("u", (), ("nop",), "nop", 1, const_default=False)
    apply = (
        p.If(p.Member(p.Call(p.ref("t.apply")), "hit"),
             (p.Assign(p.ref("meta.x"), p.Const(0x1F, 8)), p.Exit()),
             (p.If(p.Un("!", p.Call(p.ref("hdr.a.isValid"))), (p.CallStmt(p.Call(p.ref("hdr.a.setValid"))),)),)),
        p.If(p.Bin("==", B, p.Const(1, 8)), (p.Comment("then"),)),
        p.CallStmt(p.Call(p.ref("u.apply"))),
        p.CallStmt(p.Call(p.Path("mark_to_drop"), (p.Path("standard_metadata"),))),
        p.CallStmt(p.Call(p.Path("hash"), (A, p.ref("HashAlgorithm.crc16"), p.Const(0, 16),
                                          p.ListExpr((A, B, p.Slice(C, 7, 0))), p.Const(1 << 16, 17)))),
        p.Assign(p.ref("meta.h"), p.Call(p.ref("h.get"), (p.ListExpr(()),))),
        p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.Cast(PORT, p.Slice(p.ref("meta.port"), 8, 0))),
        p.Assign(p.ref("meta.flag"), p.Cast(p.Bool(), p.Cast(p.Bits(1), B))),
        p.Assign(p.ref("meta.b"), p.Const(1, 0)),
        p.Assign(p.ref("meta.b"), p.Const(0, 0)),
        p.Assign(p.Slice(p.ref("meta.w"), 15, 0), p.Bin("+", p.Cast(p.Bits(32), p.Slice(A, 15, 0)),
                                                         p.Bin(">>", A, p.Const(16, -1, 10)))),
        p.Assign(A, p.Call(p.Path("f"), (B,), (p.Bits(8), p.TypeName("T")))),
        p.Assign(A, p.Bin("+", p.Bin("*", p.Call(p.Path("f"), (B,), (p.Bits(8),)), B), C)),
        p.Assign(A, p.Member(p.Bin("+", A, B), "x")),
        p.Assign(A, p.Slice(p.Cast(p.Bits(16), B), 7, 0)),
        p.Assign(A, p.Const(0x100, -1)),
    )
    control = p.Control(
        "Ingress",
        (p.Param("inout", p.TypeName("headers_t"), "hdr"), p.Param("in", p.Bool(), "flag")),
        (p.Instance(p.TypeName("Counter", (p.Bits(32), p.Bits(32))), (p.Const(256, -1, 10),
                                                                      p.ref("CounterType_t.PACKETS")), "drops"),
         p.Instance(p.TypeName("Hash", (p.Bits(16),)), (p.ref("HashAlgorithm_t.CRC16"),), "h", "a hash"),
         p.Action("nop", (), ()), action, table, bare),
        apply,
        comment="the ingress",
    )
    return _program(
        p.Typedef(p.Bits(9), "PortId_t"),
        p.ConstDecl(p.Bits(8), "NFC_DROP_X", p.Const(0xA, 8), "a reason\nover two lines"),
        p.ConstDecl(p.Bool(), "YES", p.Const(1, 0)),
        p.ConstDecl(p.Bits(16), "PORT", p.Const(64, 16, 10)),
        p.HeaderType("in_h", (("reason", p.Bits(8)), ("port", PORT)), "to the controller",
                     (p.Annotation("controller_header", "packet_in"), p.Annotation("hidden"))),
        p.HeaderType("bare_h", (("x", p.Bits(8)),)),
        p.Struct("headers_t", (("a", p.TypeName("in_h")), ("ok", p.Bool())), "headers"),
        p.Struct("empty_t", ()),
        parser,
        p.Parser("P", (), (), (p.State("start", ()),)),
        control,
        p.Control("Empty", (), (), ()),
        p.Instance(p.TypeName("Pipeline"), (p.Call(p.Path("IngressParser")), p.Call(p.Path("Ingress"))), "pipe",
                   "the package"),
        p.Instance(p.TypeName("Switch"), (p.Path("pipe"),), "main"),
        preamble=("// Generated", "#include <core.p4>", "#define X 1", "#include <tna.p4>"),
    )


def test_every_construct_round_trips_exactly() -> None:
    tree = _everything()
    assert tree == canonical(tree)  # written with the bases the text can show
    assert round_trip(tree) == tree


@pytest.mark.parametrize("op", BINARY)
def test_every_binary_operator_round_trips(op: str) -> None:
    for value in (p.Bin(op, A, B), p.Bin(op, p.Bin(op, A, B), C), p.Bin(op, A, p.Bin(op, B, C)),
                  p.Bin(op, p.Un("-", A), p.Cast(p.Bits(8), B))):
        tree = _program(_assign(value))
        assert round_trip(tree) == tree


@pytest.mark.parametrize("op", ["!", "~", "-"])
def test_every_unary_operator_round_trips(op: str) -> None:
    for value in (p.Un(op, A), p.Un(op, p.Un(op, A)), p.Un(op, p.Bin("&", A, B)), p.Un(op, p.Slice(A, 3, 0)),
                  p.Un(op, p.Const(5, 8)), p.Un(op, p.Cast(p.Bits(8), A)), p.Cast(p.Bits(8), p.Un(op, A))):
        tree = _program(_assign(value))
        assert round_trip(tree) == tree


@pytest.mark.parametrize(
    ("const", "text"),
    [(p.Const(0x1F, 8), "8w0x1f"), (p.Const(31, 8, 10), "8w31"), (p.Const(5, 16), "16w5"),
     (p.Const(16, -1, 10), "16"), (p.Const(0x100, -1), "0x100"), (p.Const(1, 0), "true"),
     (p.Const(0, 0), "false"), (p.Const(0, 1), "1w0")],
)
def test_literals_keep_width_and_base(const: p.Const, text: str) -> None:
    tree = _program(_assign(const))
    assert f"= {text};" in print_program(tree)
    assert round_trip(tree) == tree


def test_a_small_literal_reads_back_with_the_default_base() -> None:
    assert round_trip(_program(_assign(p.Const(5, 8, 10)))) == _program(_assign(p.Const(5, 8)))


def test_no_preamble_and_no_declarations() -> None:
    for tree in (p.Program(()), p.Program(("// only a preamble",)), _program(p.Struct("s", ()), preamble=()),
                 _program(p.Parser("P", (), (), ()))):
        assert round_trip(tree) == tree


def test_comment_lines_without_a_blank_line_belong_to_the_first_declaration() -> None:
    prog = parse_program("// about s\nstruct s {\n}\n")
    assert prog == p.Program((), (p.Struct("s", (), "about s"),))


# ---- precedence of unparenthesised text ---------------------------------------------

LEVELS = [["*", "/", "%"], ["+", "-", "++", "|+|", "|-|"], ["<<", ">>"], ["&"], ["^"], ["|"],
          ["<", "<=", ">", ">="], ["==", "!="], ["&&"], ["||"]]  # tightest first: P4_16 §8 / p4c


def expr(text: str) -> p.Expr:
    decl = parse_program(f"const bit<8> X = {text};\n").decls[0]
    assert isinstance(decl, p.ConstDecl)
    return decl.value


def test_precedence_levels_are_the_ones_of_p4() -> None:
    a, b, c = p.Path("a"), p.Path("b"), p.Path("c")
    for i, tight in enumerate(LEVELS):
        for loose in LEVELS[i + 1:]:
            for hi in tight:
                for lo in loose:
                    assert expr(f"a {lo} b {hi} c") == p.Bin(lo, a, p.Bin(hi, b, c)), (lo, hi)
                    assert expr(f"a {hi} b {lo} c") == p.Bin(lo, p.Bin(hi, a, b), c), (hi, lo)


def test_operators_of_one_level_associate_to_the_left() -> None:
    a, b, c = p.Path("a"), p.Path("b"), p.Path("c")
    for level in LEVELS:
        for first in level:
            for second in level:
                assert expr(f"a {first} b {second} c") == p.Bin(second, p.Bin(first, a, b), c)


def test_bitwise_operators_bind_tighter_than_comparisons() -> None:
    """The one place P4 differs from C."""
    assert expr("a & b == c") == p.Bin("==", p.Bin("&", p.Path("a"), p.Path("b")), p.Path("c"))
    assert expr("a | b < c") == p.Bin("<", p.Bin("|", p.Path("a"), p.Path("b")), p.Path("c"))


def test_prefix_and_postfix_operators() -> None:
    a, b = p.Path("a"), p.Path("b")
    ab = p.Member(a, "b")
    assert expr("-a.b[7:0]") == p.Un("-", p.Slice(ab, 7, 0))
    assert expr("(bit<8>)a.b") == p.Cast(p.Bits(8), ab)
    assert expr("(PortId_t)a.b[8:0]") == p.Cast(PORT, p.Slice(ab, 8, 0))
    assert expr("(bit<8>)a + b") == p.Bin("+", p.Cast(p.Bits(8), a), b)
    assert expr("!a && b") == p.Bin("&&", p.Un("!", a), b)
    assert expr("-a * b") == p.Bin("*", p.Un("-", a), b)
    assert expr("~-a") == p.Un("~", p.Un("-", a))
    assert expr("a - -b") == p.Bin("-", a, p.Un("-", b))
    assert expr("(bool)(bit<1>)a") == p.Cast(p.Bool(), p.Cast(p.Bits(1), a))
    assert expr("t.apply().hit") == p.Member(p.Call(p.ref("t.apply")), "hit")
    assert expr("a.b.c") == p.ref("a.b.c")
    assert expr("(a + b) * b") == p.Bin("*", p.Bin("+", a, b), b)
    assert expr("a < b") == p.Bin("<", a, b)
    assert expr("pkt.lookahead<bit<8>>()") == p.Call(p.ref("pkt.lookahead"), (), (p.Bits(8),))


def test_keysets_written_by_hand() -> None:
    text = """parser P(
) {
    state start {
        transition select(a, b.c) {
            (8w1 &&& 8w0xf, default): s;
            (1 .. 5, a + 1): t;
            8w0 .. 8w9: u;
            a + b &&& 0xff: v;
            default: accept;
        }
    }
}
"""
    state = parse_program(text).decls[0]
    assert isinstance(state, p.Parser)
    one = p.Const(1, -1)
    assert state.states[0] == p.State("start", (), (p.Path("a"), p.ref("b.c")), (
        p.Case((p.Mask(p.Const(1, 8), p.Const(0xF, 8)), p.Default()), "s"),
        p.Case((p.Range(one, p.Const(5, -1)), p.Bin("+", p.Path("a"), one)), "t"),
        p.Case((p.Range(p.Const(0, 8), p.Const(9, 8)),), "u"),
        p.Case((p.Mask(p.Bin("+", p.Path("a"), p.Path("b")), p.Const(0xFF, -1)),), "v"),
        p.Case((p.Default(),), "accept"),
    ))


# ---- errors -------------------------------------------------------------------------

CONTROL = "control C(\n) {\n%s    apply {\n%s    }\n}\n"


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("const bit<8> X = 8w1\n\nconst bit<8> Y = 8w2;\n", 3, 1, ["';'", "found 'const'"]),
        ("const bit<8> X = $;\n", 1, 18, ["a name", "a number", "found '$'"]),
        ("control C(\n) {\n    apply {\n    }\n", 4, 6, ["'}'", "end of input"]),
        ("// c\ntypedef bit<9> P;\n", 1, 1, ["no comment before a typedef"]),
        ("const bit<8> X = 0w5;\n", 1, 18, ["width above 0"]),
        ("const bit<8> X = " + "1" * 5000 + ";\n", 1, 18, ["at most 4300 decimal digits"]),
        ("header h {\n    bit<8> a\n}\n", 3, 1, ["';'", "found '}'"]),
        ("parser P(\n) {\n    state s {\n    }\n}\n", 4, 5, ["'transition'", "found '}'"]),
        ("const bit<8> X = 8w1;\n#include <x>\n", 2, 1, ["'const'", "'header'", "found '#'"]),
        (CONTROL % ("    table t {\n        actions = {\n        }\n    }\n", ""), 4, 9, ["'key'", "found 'actions'"]),
        (CONTROL % ("    table t {\n        key = {\n            a : exact @foo(\"x\");\n", ""), 5, 24,
         ["'name'", "found 'foo'"]),
        (CONTROL % ("", "        x;\n"), 4, 10, ["'='", "found ';'"]),
        (CONTROL % ("", "        x = (y);\n"), 4, 16, ["a name", "found ';'"]),
        (CONTROL % ("", "        x = 8w1 &&& 8w1;\n"), 4, 17, ["found '&&&'"]),
        ("const bit<8> X = a<b;\n", 1, 21, ["'>'", "found ';'"]),
        ("struct s {\n    bit <8> x;\n}\n", 2, 9, ["no space before it", "found '<'"]),
    ],
)
def test_malformed_text_reports_line_and_column(text: str, line: int, column: int, words: list[str]) -> None:
    with pytest.raises(P4ParseError) as info:
        parse_program(text)
    e = info.value
    assert (e.line, e.column) == (line, column), str(e)
    assert str(e).startswith(f"line {line}, column {column}: ")
    for word in words:
        assert word in e.message
    assert isinstance(e, ValueError)
    again = pickle.loads(pickle.dumps(e))
    assert (again.line, again.column, again.message) == (e.line, e.column, e.message)


def test_broken_text_raises_only_p4_parse_errors() -> None:
    """Every prefix and many one-character deletions of a printed program: either a
    program or a P4ParseError, never a Lark exception."""
    text = print_program(_program(
        p.HeaderType("h_t", (("x", p.Bits(8)),), "h", (p.Annotation("a", "b"),)),
        p.Parser("P", (p.Param("in", p.Bits(8), "v"),), (), (
            p.State("start", (p.Comment("c"),), (p.Call(p.ref("pkt.lookahead"), (), (p.Bits(8),)),),
                    (p.Case((p.Mask(p.Const(1, 8), p.Const(0xF0, 8)), p.Default()), "accept"),)),)),
        p.Control("C", (), (p.Table("t", (p.Key(A, "lpm", "k"),), ("a",), "a", 4),), (
            p.If(p.Bin("==", p.Cast(p.Bits(8), A), p.Const(0x10, 8)), (p.Exit(),), (p.CallStmt(p.Call(C)),)),)),
    ))
    for cut in [*range(0, len(text), 2), *(len(text) + i for i in range(-40, 0))]:
        for broken in (text[:cut], text[:cut] + text[cut + 1:]):
            try:
                parse_program(broken)
            except P4ParseError as e:
                assert e.line >= 1 and e.column >= 1


def test_deep_nesting_needs_no_recursion() -> None:
    """The tree is built as LALR reduces, so nesting depth is not bounded by Python's stack."""
    depth = 5000
    value = expr("(" * depth + "a" + " + b)" * depth)
    for _ in range(depth):
        assert isinstance(value, p.Bin) and value.right == p.Path("b")
        value = value.left
    assert value == p.Path("a")
