"""Each user mistake gets one diagnostic with a stable code, line, column and message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lang.parser import MAX_DEPTH
from tests.support import ROOT, nfc_cli

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
    ("table t { key { ip.dst: exact; } value { p: bit<9>; } size = 4; }\nstage s { refresh t; }",
     "E013", 2, 11, "control-plane table"),
    ("stage s { refresh nope; }", "E011", 1, 11, "unknown state 'nope'"),
    ("state st { key { ip.src: exact; } size = 4; }\nstage s { insert st { } timeout 18446744073709551617; }",
     "E090", 2, 33, "timeout must be above 0s and at most 4294967296s, not 18446744073709551617s"),
    ("state st { key { ip.src: exact; } size = 4; }\nstage s { insert st { } timeout bit<64>(ip.src); }",
     "E090", 2, 33, "timeout must be at most 32 bits of seconds"),
    ("table t { key { ip.dst: exact; } size = 4; idle_limits = [90%: 300s]; }",
     "E032", 1, 44, "idle_limits is for a switch cache: the table needs 'cache = true;'"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = 300s; }",
     "E032", 1, 72, "idle_limits must be a list like [85%: 1100s"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = [90: 300s]; }",
     "E001", 1, 75, "unexpected ':'"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = [90s: 300s]; }",
     "E032", 1, 73, "occupancy must be a percentage between 0% and 100%"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = [90%: 300s, 90%: 1s]; }",
     "E032", 1, 84, "occupancy 90% is given twice"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = [90%: 5GiB]; }",
     "E032", 1, 78, "timeout must be a duration like 120s"),
    ("table t { key { ip.dst: exact; } size = 4; cache = true; idle_limits = [120%: 1s]; }",
     "E032", 1, 73, "occupancy must be a percentage between 0% and 100%"),
    ("table t { key { ip.dst: exact; } size = 4; skew = [1%: 1s]; }",
     "E032", 1, 51, "skew must be a number"),
    ("state st { key { ip.src: exact; ip.ttl: exact; } size = 4; holds_ports = [ip_src, ip_ttl]; }",
     "E032", 1, 74, "'ip_ttl' must be bit<16> as alloc_port's port is, not bit<8>"),
    ("state st { key { ip.src: exact; } size = 4; holds_ports = [ip_src, port]; }",
     "E032", 1, 59, "'port' is not a key field of 'st' (known: ip_src)"),
    ("state st { key { ip.src: exact; } size = 4; holds_ports = ip_src; }",
     "E032", 1, 59, "holds_ports names two key fields: [address, port]"),
    ("table t { key { ip.src: exact; ip.id: exact; } size = 4; holds_ports = [ip_src, ip_id]; }",
     "E032", 1, 58, "only data-plane state holds ports"),
    ("state a { key { ip.src: exact; ip.id: exact; } size = 4; holds_ports = [ip_src, ip_id]; }\n"
     "state b { key { ip.dst: exact; ip.id: exact; } size = 4; holds_ports = [ip_dst, ip_id]; }",
     "E032", 2, 58, "only one state may hold the ports alloc_port gives out"),
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
        (b"stage s { x = " + b"~" * (MAX_DEPTH + 5) + b"1; }", "E005", "nest deeper than"),
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
    r = nfc_cli("build", str(tmp_path / "t.nfp"), "-o", str(tmp_path / "o"))
    assert r.returncode == 0 and "warning[W001]: stage 'mark' is in no pipeline" in r.stderr, r.stderr[-2000:]
    plan = json.loads((tmp_path / "o/plan.json").read_text())
    assert {t["name"]: t["placement"] for t in plan["tables"]}["remark"] == "unused"


# ---- malformed input gets a diagnostic, never an internal error (issue 17) -----------------

def _errors_at(front, src: str) -> list[tuple[str, int, int, str]]:
    _, diags, _ = front.load(PRELUDE + src)
    return [(d.code, d.span.line - PRE, d.span.col, d.message) for d in diags.errors()]


def _has(found: list[tuple[str, int, int, str]], code: str, line: int, col: int, msg: str) -> bool:
    return any(c == code and ln == line and cl == col and msg in m for c, ln, cl, m in found)


@pytest.mark.parametrize(("src", "code", "line", "col", "msg"), [
    # was ValueError from int('007', 0) / int('0x', 0): internal errors
    ("table t { key { ip.dst: exact; } size = 007; }", "E004", 1, 41, "leading zero (write 7"),
    ("stage s { ip.ttl = 0x_; }", "E004", 1, 20, "no digits after '0x'"),
    ("stage s { ip.ttl = 0b__; }", "E004", 1, 20, "no digits after '0b'"),
    ("stage s { ip.dst = 010.0.0.1; }", "E004", 1, 20, "leading zero"),
    ("table t { key { ip.dst: exact; } size = 16Q; }", "E004", 1, 41, "malformed number '16Q'"),
    # was ValueError: Python's 4300-digit limit on int(str)
    ("stage s { ip.ttl = " + "9" * 5000 + "; }", "E021", 1, 20, "5000 digits is wider than any bit<N>"),
    ("stage s { ip.ttl = ip.ttl[" + "1" * 5000 + ":0]; }", "E021", 1, 27, "wider than any bit<N>"),
    # was MemoryError: a slice of 2^40 bits became a width, and 1 << width was computed
    ("stage s { ip.ttl = 1 + ip.ttl[1099511627776:0]; }", "E020", 1, 24, "slice [1099511627776:0] must satisfy"),
    # "tablefoo" was lexed as "table foo" where a name cannot stand
    ("table t { key { ip.dst: exact; } size = 4; }\ntablefoo { key { ip.dst: exact; } size = 4; }",
     "E001", 2, 1, "unexpected name 'tablefoo'"),
    ("stage s { lookup t { hitx { drop(x); } } }", "E001", 1, 22, "unexpected name 'hitx'"),
])
def test_malformed_literals_and_glued_keywords_are_diagnostics(front, src, code, line, col, msg):
    found = _errors_at(front, src)
    assert _has(found, code, line, col, msg), found


def test_a_long_operator_chain_is_E005_not_a_recursion_error(front):
    """A 500-term '+' chain nested 500 deep: the checker recursed past Python's stack limit."""
    found = _errors_at(front, "stage s {\n  ip.ttl = ip.ttl" + " + 1" * 500 + ";\n}")
    assert [(c, ln) for c, ln, _, _ in found] == [("E005", 2)], found
    assert "nest deeper than 64 levels" in found[0][3]


def test_deeply_nested_statements_are_E005(front):
    src = "stage s {\n" + "if (ip.ttl == 1) { " * 70 + "ip.ttl = 2;" + " }" * 70 + "\n}"
    assert [c for c, *_ in _errors_at(front, src)] == ["E005"]


def test_parentheses_do_not_count_as_nesting(front):
    """60 nested parentheses used to exhaust the stack in the parse-tree transformer (each
    level was ten tree nodes deep); parentheses add no node, so any number is fine."""
    assert _errors_at(front, "stage s { ip.ttl = " + "(" * 500 + "ip.ttl" + ")" * 500 + "; }") == []


@pytest.mark.parametrize(("src", "line", "col", "msg"), [
    # were OverflowError (int too large to convert to float), IndexError (rate of 1e400) or a
    # MemoryError (range(32, 99999999999)) in lower, profiles, server_fit and the plan
    ("table t { key { ip.dst: exact; } size = 1" + "0" * 400 + "; }", 1, 41, "size must be at most 4294967295"),
    ("table t { key { ip.dst: exact; } size = 1" + "0" * 400 + "G; }", 1, 41, "not infinity"),
    ("register r: bit<8>[99999999999G];", 1, 20, "register size must be at most 4294967295"),
    ("target srv = dpdk_server { cores = 1" + "0" * 400 + "; }", 1, 36, "cores must be at most 2^53"),
    ("deployment d { rate = 1" + "0" * 400 + "Mpps; }", 1, 23, "rate must be at most 2^53"),
    ("deployment d { server_ports = [32..99999999999]; }", 1, 31, "port range 32..99999999999 must be ascending"),
    ("pipeline p { ports = [0..70000]; }", 1, 22, "port range 0..70000"),
    ("state st { key { ip.src: exact; } value { p: bit<8>; } size = 4; timeout = 0s; }", 1, 76,
     "timeout must be above 0s"),
])
def test_numbers_beyond_the_limits_are_E090(front, src, line, col, msg):
    found = _errors_at(front, src)
    assert _has(found, "E090", line, col, msg), found


def test_pipeline_ports_must_be_a_group_or_a_list(front):
    """``ports = "s"`` passed the checker and crashed Z3 in nfc build (Z3Exception)."""
    found = _errors_at(front, 'parser q { state start { transition accept; } }\nstage s { forward(1); }\n'
                              'pipeline p { ports = "s"; parser = q; stages = [s]; }')
    assert found == [("E050", 3, 22, "ports must be a port group or a list like [0..7]")]


def test_concatenation_wider_than_any_width_is_E022(front):
    src = "metadata { w: bit<2048>; }\nstage s { let x: bit<8> = (meta.w ++ meta.w)[7:0]; }"
    assert _has(_errors_at(front, src), "E022", 2, 28, "wider than bit<2048>")


@pytest.mark.parametrize(("prop", "msg"), [
    ("stages = 100000000;", "stages must be between 1 and 64, not 1e+08"),  # was a hang in the partitioner
    ("sram_bits = 0;", "sram_bits must be between 1 and 4096, not 0"),  # was ZeroDivisionError
    ("port_bits = 100;", "port_bits must be between 1 and 16, not 100"),
])
def test_target_resources_out_of_range_are_E090(tmp_path, prop, msg):
    src = (ROOT / "tests/corpus/all_switch.nfp").read_text().replace(
        "target srv", f"target sw = tofino1 {{ {prop} }}\ntarget srv").replace("switch = tofino1;", "switch = sw;")
    (tmp_path / "t.nfp").write_text(src)
    r = nfc_cli("build", str(tmp_path / "t.nfp"), "-o", str(tmp_path / "o"))
    line = src[:src.index("target sw")].count("\n") + 1
    assert r.returncode == 1 and f"t.nfp:{line}:23: error[E090]: {msg}" in r.stderr, r.stderr[-2000:]


def _load_file(path: Path) -> list[tuple[str, int, int, str]]:
    from lang import Diagnostics, SourceMap, load

    diags = Diagnostics()
    load(str(path), diags, SourceMap())
    return [(d.code, d.span.line, d.span.col, d.message) for d in diags.errors()]


def test_an_import_of_a_device_is_E003_and_not_read(tmp_path):
    """``import "/dev/zero"`` was read without bound (22.6 GB, OOM)."""
    (tmp_path / "t.nfp").write_text('\nimport "/dev/zero";\n')
    assert _load_file(tmp_path / "t.nfp") == [("E003", 2, 1, "cannot read '/dev/zero': not a regular file")]


def test_an_import_of_a_fifo_is_E003_without_waiting(tmp_path):
    """An import of a FIFO blocked forever waiting for a writer."""
    import signal

    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "t.nfp").write_text('import "pipe";\n')

    def stuck(*_):
        raise TimeoutError("load blocked on the FIFO")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        found = _load_file(tmp_path / "t.nfp")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [(c, ln, col) for c, ln, col, _ in found] == [("E003", 1, 1)] and "not a regular file" in found[0][3]


def test_a_file_larger_than_the_limit_is_E002(tmp_path):
    from lang.limits import MAX_SOURCE_BYTES

    (tmp_path / "t.nfp").write_bytes(b"// " + b"x" * MAX_SOURCE_BYTES)
    assert [(c, m) for c, _, _, m in _load_file(tmp_path / "t.nfp")] == [("E002", "'" + str(tmp_path / "t.nfp")
                                                                          + "' is larger than 1 MiB")]


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    """Was E001 "unexpected character '\\ufeff'" at 1:1; columns do not count the mark."""
    (tmp_path / "t.nfp").write_bytes(b"\xef\xbb\xbf" + (PRELUDE + "stage s { ip.ttl = 256; }").encode())
    assert _load_file(tmp_path / "t.nfp") == [("E021", PRE + 1, 20, "value 256 does not fit in bit<8>")]


@pytest.mark.parametrize("eol", ["\r", "\r\n"], ids=["CR", "CRLF"])
def test_cr_and_crlf_end_lines_for_the_lexer_and_the_diagnostic_alike(tmp_path, eol):
    """With CR-only line ends the lexer saw one line (a leading // comment swallowed the whole
    file, which then compiled to nothing); now the error is found, on the right line, quoted."""
    from lang import Diagnostics, SourceMap, load

    text = "// a comment\n" + PRELUDE + "stage s {\n  ip.ttl = 256;\n}\n"
    (tmp_path / "t.nfp").write_bytes(text.replace("\n", eol).encode())
    diags, sources = Diagnostics(), SourceMap()
    load(str(tmp_path / "t.nfp"), diags, sources)
    (d,) = diags.errors()
    assert (d.code, d.span.line, d.span.col) == ("E021", PRE + 3, 12)
    assert sources.render(d).splitlines()[1].endswith("|   ip.ttl = 256;")


def test_unicode_line_separators_are_not_line_ends(tmp_path):
    """U+2028 (and NEL, form feed) ended a line in the quoted source but not for the lexer, so a
    diagnostic quoted another line than the one it named."""
    from lang import Diagnostics, SourceMap, load

    text = "// one\u2028two\x85three\x0cfour\n" + PRELUDE + "stage s { ip.ttl = 256; }\n"
    (tmp_path / "t.nfp").write_text(text)
    diags, sources = Diagnostics(), SourceMap()
    load(str(tmp_path / "t.nfp"), diags, sources)
    (d,) = diags.errors()
    assert (d.code, d.span.line, d.span.col) == ("E021", PRE + 2, 20)
    assert sources.render(d).splitlines()[1].endswith("| stage s { ip.ttl = 256; }")
    _, diags, _ = (None, Diagnostics(), None)
    (tmp_path / "u.nfp").write_text("stage s {\u2028}")
    assert [(c, ln, col) for c, ln, col, _ in _load_file(tmp_path / "u.nfp")] == [("E001", 1, 10)]


def test_quoted_lines_are_printable_and_cut_around_the_caret(front):
    """A control character cannot reach the terminal, and a 5000-character line is shown as a
    window around the caret, which still points at the offending text."""
    _, diags, sources = front.load(PRELUDE + "stage s { ip.ttl = 256; } // \x1b[2J" + "x" * 5000 + "\n"
                                   + "stage t { ip.ttl = " + "1 + " * 40 + "256; }")
    first, second = (sources.render(d).splitlines() for d in diags.errors())
    assert "\x1b" not in first[1] and "\ufffd[2J" in first[1] and len(first[1]) < 140
    assert len(second[1]) < 140 and second[1][second[2].index("^"):].startswith("1 + 1")


@pytest.mark.parametrize(("src", "line", "col", "msg"), [
    # lowered to an uninitialised local: 'if (C)' read 0, and C - 1 read the packet's TTL as 0
    ("const C: bit<8> = ip.ttl;\nstage s { ip.ttl = C; }", 1, 19, "const 'C' must be a literal"),
    # the stage's one variable 'x' was bit<8> and bit<16> at once: Z3 sort mismatch, P4 lint error
    ("stage s { let x: bit<8> = 1; if (ip.ttl == 3) {\nlet x: bit<16> = 2; ip.ttl = x[7:0]; } }", 2, 1,
     "local 'x' is declared bit<16> here and bit<8> before"),
    # the local lost to the const when lowered (the checker read the local)
    ("const C: bit<8> = 5;\nstage s { let C: bit<8> = 1; ip.ttl = C; }", 2, 11, "local 'C' would hide const 'C'"),
])
def test_what_lowering_would_change_silently_is_E010_or_E020(front, src, line, col, msg):
    found = _errors_at(front, src)
    assert [(ln, cl) for c, ln, cl, m in found if msg in m] == [(line, col)], found


def test_a_select_value_must_be_a_constant(front):
    """An expression as a select value passed the checker and stopped lowering ('internal
    error: select values must be constants')."""
    src = ("parser p { state start { extract eth; transition select(eth.ethertype) {\n"
           "  eth.src[15:0]: ip; ETH_IPV4 &&& eth.ethertype: ip; ETH_IPV4: ip; default: accept; } }\n"
           "  state ip { extract ip; transition accept; } }")
    found = _errors_at(front, src)
    assert [(c, ln, cl) for c, ln, cl, _ in found] == [("E020", 2, 3), ("E020", 2, 35)], found
    assert all("must be a number or a const" in m for *_, m in found)


def test_a_bool_const_lowers_to_its_value(front):
    from compiler import ir
    from compiler.lower import lower

    prog, diags, _ = front.load(PRELUDE + "const ON: bool = true;\nstage s { if (ON) { ip.ttl = 1; } }")
    assert not diags.has_errors
    (cond,) = [s.cond for s in lower(prog).stages["s"].body if isinstance(s, ir.If)]
    assert (cond.value, cond.width) == (1, ir.BOOL)  # was Local('ON'): an uninitialised variable, false


def test_an_ipv4_octet_over_255_is_E021_in_a_property_too(front):
    """Checked only inside expressions: ``link = 256.0.0.1;`` passed nfc check, and nfc fmt
    printed it as ``link = -1;``, which does not parse (found by the fmt oracle of the fuzzer)."""
    found = _errors_at(front, "deployment d { link = 256.0.0.1; }")
    assert found == [("E021", 1, 23, "IPv4 address octets must be at most 255")]


def test_a_deployment_rate_beyond_a_trillion_packets_is_E090(tmp_path):
    src = (ROOT / "tests/corpus/all_switch.nfp").read_text().replace("rate = 1Mpps;", "rate = 9000000000000Mpps;")
    (tmp_path / "t.nfp").write_text(src)
    r = nfc_cli("build", str(tmp_path / "t.nfp"), "-o", str(tmp_path / "o"))
    line = src[:src.index("rate = 9")].count("\n") + 1
    assert r.returncode == 1 and f"t.nfp:{line}:3: error[E090]: rate must be at most 1e+06Mpps, not 9e+12Mpps" \
        in r.stderr, r.stderr[-2000:]
