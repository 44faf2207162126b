"""Each user mistake gets one diagnostic with a stable code, line, column and message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lang.parser import MAX_NESTING
from tests.conftest import ROOT

PRELUDE = 'import "std/headers.nfp";\nimport "std/ops.nfp";\npacket { eth: ethernet; ip: ipv4; }\n'
PRE = PRELUDE.count("\n")

# (source after the prelude, code, line relative to the end of the prelude, column, message part)
CASES = [
    ("table t { key { ip.dst exact; } size = 1; }", "E001", 1, 24, "unexpected 'exact'"),
    ("stage s { ip.nope = 1; }", "E012", 1, 11, "header 'ip' (ipv4) has no field 'nope'"),
    ("stage s { ip.ttl = ip.dst; }", "E020", 1, 20, "expected bit<8>, not bit<32>"),
    ("stage s { ip.ttl = 256; }", "E021", 1, 20, "value 256 does not fit in bit<8>"),
    ("table t { key { valid(ip): exact; } size = 4; }", "E031", 1, 17, "table key must be bit<N>, not bool"),
    ("table t { key { ip.dst: fuzzy; } size = 4; }", "E031", 1, 25, "match kind must be one of"),
    ("table t { key { ip.dst: lpm; ip.src: lpm; } size = 4; }", "E031", 1, 38, "may have one lpm key, not 2"),
    ("table t { key { ip.dst: exact; } }", "E030", 1, 1, "needs a size estimate"),
    ("table t { key { ip.dst: exact; } size = 4; colour = 4; }", "E032", 1, 44, "unknown table property 'colour'"),
    ("stage s { lookup nope { miss { drop(x); } } }", "E011", 1, 18, "unknown table 'nope'"),
    ("stage s { if (ip.ttl) { drop(x); } }", "E020", 1, 15, "expected bool, not bit<8>"),
    ("stage s { ip.ttl = ip.ttl + ip.src; }", "E020", 1, 20, "operands of '+' must have the same type"),
    ("header h { a: bit<3>; }", "E022", 1, 1, "whole number of bytes, not 3 bits"),
    ("header h { a: bit<0>; b: bit<8>; }", "E022", 1, 15, "width must be between 1 and 2048, not 0"),
    ("stage s { forward(ip.src); }", "E020", 1, 19, "port must be bit<N> with N <= 16, not bit<32>"),
    ("stage s { std.ingress_port = 1; }", "E024", 1, 11, "std.ingress_port is read-only"),
    ("stage s { esp_decrypt(1); }", "E023", 1, 11, "expected 4 arguments, not 1"),
    ("state st { key { ip.src: lpm; } value { p: bit<16>; } size = 4; }", "E031", 1, 26, "keys must be exact"),
    ("table t { key { ip.dst: exact; } value { p: bit<9>; } size = 4; }\nstage s { insert t { p = 1; } }",
     "E013", 2, 11, "control-plane table"),
    ("parser p { state start { extract eth; transition next; } }", "E011", 1, 50, "unknown parser state 'next'"),
    ("parser p { state s0 { transition accept; } }", "E040", 1, 1, "must have a state named 'start'"),
    ("parser p { state start { extract eth; transition start; } }", "E040", 1, 50, "loop through state 'start'"),
    ("stage s { ip.ttl = ip.ttl[9:2]; }", "E020", 1, 20, "slice [9:2] must satisfy 7 >= hi >= lo >= 0"),
    ("stage s { let x = 5; }", "E020", 1, 11, "needs a type"),
    ("stage s {}\nstage s {}", "E010", 2, 1, "'s' is defined twice"),
    ("stage s { ip.dst = 300.1.1.1; }", "E021", 1, 20, "octets must be at most 255"),
    ("stage s { extract ip; }", "E013", 1, 11, "extract is only allowed in a parser state"),
    ("pipeline p { stages = [nope]; }", "E050", 1, 1, "needs 'ports = ...'"),
]


@pytest.mark.parametrize(("src", "code", "line", "col", "msg"), CASES, ids=[c[4][:40] for c in CASES])
def test_diagnostic(front, src, code, line, col, msg):
    _, diags, _sources = front.load(PRELUDE + src)
    found = [(d.code, d.span.line - PRE, d.span.col, d.message) for d in diags.errors()]
    assert any(c == code and ln == line and cl == col and msg in m for c, ln, cl, m in found), found


def test_several_independent_errors_in_one_run(front):
    src = "stage a { ip.ttl = 999; }\nstage b { ip.bogus = 1; }\ntable t { key { ip.dst exact; } size = 1; }\n"
    _, diags, _ = front.load(PRELUDE + src)
    assert sorted(d.code for d in diags.errors()) == ["E001", "E012", "E021"]


def test_rendering_has_location_line_and_caret(front):
    _, diags, sources = front.load(PRELUDE + "stage s { ip.ttl = 256; }")
    text = sources.render(diags.errors()[0])
    lines = text.splitlines()
    assert lines[0].endswith(f"t.nfp:{PRE + 1}:20: error[E021]: value 256 does not fit in bit<8>")
    assert lines[1].endswith("| stage s { ip.ttl = 256; }")
    assert lines[2].index("^") == lines[1].index("256")


@pytest.mark.parametrize(
    ("data", "code", "msg"),
    [
        (b"", None, None),
        (b"\x00\x01\x02binary\xff", "E002", "UTF-8"),
        (b"header h { a: bit<8>", "E001", "end of file"),
        (b"stage s { x = " + b"(" * (MAX_NESTING + 5) + b"1" + b")" * (MAX_NESTING + 5) + b"; }", "E002", "nesting"),
        (b"const c: bit<8> = " + b"9" * 400 + b";", "E021", "value of 1329 bits does not fit in bit<8>"),
        (b"header h { a: bit<99999999999999999999>; }", "E022", "width must be between"),
    ],
    ids=["empty", "binary", "truncated", "deep", "huge-number", "huge-width"],
)
def test_malformed_input_gets_clean_diagnostic(front, tmp_path, data, code, msg):
    path = tmp_path / "bad.nfp"
    path.write_bytes(data)
    from lang import Diagnostics, SourceMap, load

    diags = Diagnostics()
    load(str(path), diags, SourceMap())
    if code is None:
        assert not diags.has_errors
    else:
        assert any(d.code == code and msg in d.message for d in diags.errors()), diags.errors()


def test_table_looked_up_in_two_stages_is_E030(front):
    src = ("table t { key { ip.dst: exact; } value { p: bit<9>; } size = 4; }\n"
           "stage a { lookup t { miss { drop(x); } } }\nstage b { lookup t { miss { drop(x); } } }")
    _, diags, _ = front.load(PRELUDE + src)
    (d,) = diags.errors()
    assert (d.code, d.span.line - PRE, d.span.col) == ("E030", 3, 18)
    assert "looked up in stages 'a' and 'b'" in d.message


def test_unused_and_unreachable_are_warnings(front):
    src = ("table t { key { ip.dst: exact; } size = 4; }\n"
           "parser p { state start { extract eth; transition accept; } state lost { transition accept; } }")
    _, diags, _ = front.load(PRELUDE + src)
    assert not diags.has_errors
    got = sorted((d.code, d.span.line - PRE, d.message) for d in diags.items)
    assert got == [("W001", 1, "table 't' is never looked up or written"),
                   ("W001", 2, "parser 'p' is used by no pipeline"),
                   ("W002", 2, "parser state 'lost' is unreachable from 'start'")]


def test_syntax_error_in_a_declaration_causes_no_follow_up_errors(front):
    src = ("parser p { state start { extract eth; transition punt; } }\n"
           "pipeline q { ports = [1]; parser = p; stages = [s]; }\nstage s { forward(1); }")
    _, diags, _ = front.load(PRELUDE + src)
    assert [d.code for d in diags.errors()] == ["E001"]


def test_one_mistake_does_not_cascade(front):
    """An unknown field or table is reported once; expressions using it raise nothing more."""
    src = "stage s { ip.ttl = ip.nope + 1; forward(ip.nope); lookup nope { hit(r) { forward(r.port); } } }"
    _, diags, _ = front.load(PRELUDE + src)
    assert sorted(d.code for d in diags.errors()) == ["E011", "E012", "E012"]


@pytest.mark.parametrize(("prop", "msg"), [("pin = fpga;", "pin must be switch or server"),
                                          ("cache = 3;", "cache must be true or false"),
                                          ("skew = fast;", "skew must be a number")])
def test_table_property_values(front, prop, msg):
    _, diags, _ = front.load(PRELUDE + f"table t {{ key {{ ip.dst: exact; }} size = 4; {prop} }}")
    assert [(d.code, d.message) for d in diags.errors()] == [("E032", msg)]


def test_an_import_cycle_is_E003_at_the_import_that_closes_it(front, tmp_path):
    """docs/errors.md promised it; cyclic imports used to be accepted silently (issue 17)."""
    (tmp_path / "b.nfp").write_text('import "c.nfp";\n')
    (tmp_path / "c.nfp").write_text('\nimport "t.nfp";\n')
    _prog, diags, _sources = front.load('import "b.nfp";\n')
    (d,) = [d for d in diags.items if d.code == "E003"]
    assert (Path(d.span.file).name, d.span.line, d.span.col) == ("c.nfp", 2, 1)
    assert d.message.startswith("import cycle: ") and d.message.count(" imports ") == 3, d.message
    _prog, diags, _sources = front.load('import "t.nfp";\n', "t.nfp")
    assert [d.code for d in diags.items] == ["E003"]  # a file importing itself


def test_a_stage_in_no_pipeline_builds_with_W001(tmp_path):
    """A stage no pipeline uses (its table pinned to the server) is reported and placed nowhere;
    nfc build used to stop with an internal error (KeyError in the plan; issue 17)."""
    src = (ROOT / "tests/corpus/egress_before_cut.nfp").read_text().replace("stages = [choose, mark];",
                                                                           "stages = [choose];")
    (tmp_path / "t.nfp").write_text(src)
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(tmp_path / "t.nfp"), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "warning[W001]: stage 'mark' is in no pipeline" in r.stderr, r.stderr[-2000:]
    plan = json.loads((tmp_path / "o/plan.json").read_text())
    assert {t["name"]: t["placement"] for t in plan["tables"]}["remark"] == "unused"
