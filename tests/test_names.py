"""Names a program declares reach C, P4 and Python: the ones that would meet a name nfc
generates, or each other, or a word a language reserves, are E014 at the name; P4 keywords
that are header or metadata fields are escaped instead (std/headers.nfp's icmp ``type``)."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections import Counter

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from compiler.interp import Entry, Interpreter, Match
from lang.diagnostics import CompileError
from runtime.api import Runtime
from targets.p4 import syntax as p
from targets.p4.parse import parse_program
from targets.pyapi.generator import MODULE_NAMES, RUNTIME_ATTRS
from tests.support import ROOT, compile_file, nfc_cli, nfc_run, write

BASE = (ROOT / "tests/corpus/all_switch.nfp").read_text()


def _build(tmp_path, text: str, target: str = "tofino"):
    src = write(tmp_path, text)
    out = tmp_path / "build"
    r = nfc_cli("build", src, "-o", str(out), "--target", target,
                        "--no-verify")
    return r, out


@pytest.mark.parametrize(("changes", "at", "message"), [
    ([("packet {\n", "metadata { nfc_egress: bit<9>; }\npacket {\n")], "nfc_egress", "'nfc_egress' begins with 'nfc_'"),
    ([("packet {\n", "metadata { NFC_x: bit<9>; }\npacket {\n")], "NFC_x", "'NFC_x' begins with 'nfc_'"),
    ([("table fib", "table _fib"), ("lookup fib", "lookup _fib")], "table _fib", "table '_fib' begins with '_'"),
    ([("table fib", "table a__b"), ("lookup fib", "lookup a__b")], "table a__b", "table 'a__b' contains '__'"),
    ([("state ip {", "state i__p {"), ("ETH_IPV4: ip;", "ETH_IPV4: i__p;")], "state i__p", "contains '__'"),
    ([("value { port: bit<16>; }", "value { port__x: bit<16>; }"), ("r.port", "r.port__x")], "port__x:",
     "value of table 'fib' 'port__x'"),
    ([("miss { drop(no_route); }", "miss { drop(No_Route); }"),
      ("      forward(r.port);", "      if (ipv4.ttl == 0) { drop(no_route); }\n      forward(r.port);")],
     "drop(No_Route)", "reason 'No_Route' differs from reason 'no_route' only in letter case"),
    ([("    extract ipv4;\n", "    extract ipv4;\n    verify(ipv4.ttl > 0, No_Route);\n")],  # a parser state's verify
     "drop(no_route)", "reason 'no_route' differs from reason 'No_Route' only in letter case"),
])
def test_names_that_meet_generated_names_are_E014_at_the_name(tmp_path, changes, at, message):
    text = BASE
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if at in s)
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, text), "tofino")
    d = e.value.diagnostics[0]
    assert d.code == "E014" and message in d.message and d.span.line == line, (d.span.line, d.message)


@pytest.mark.parametrize("reason", ["server_no_buffer", "server_no_port"])
def test_a_reason_the_server_counts_its_own_drops_under_is_E014_on_the_server_alone(tmp_path, reason):
    """The server's counters keep its own drops (no buffer to send in, no DPDK port for the
    egress port) beside the program's reasons, in one "drops" object: a program's reason of
    the same name would be one count with them (and a JSON key twice).  The switch has no such
    counter: a Tofino build takes the name."""
    text = BASE.replace("miss { drop(no_route); }", f"miss {{ drop({reason}); }}")
    line = next(i for i, s in enumerate(text.splitlines(), 1) if f"drop({reason})" in s)
    r, _out = _build(tmp_path, text, "dpdk")
    assert r.returncode == 1 and f"t.nfp:{line}:" in r.stderr and "error[E014]" in r.stderr, r.stderr
    assert f"reason '{reason}' is what the server counts its own drops under" in r.stderr, r.stderr
    r, _out = _build(tmp_path, text, "tofino")
    assert r.returncode == 0, r.stderr


P4_FIELDS = BASE.replace("packet {\n", "header odd { int: bit<8>; type: bit<8>; apply: bit<16>; }\n"
                         "metadata { bit: bit<8>; }\npacket {\n  o: odd;\n").replace(
    "      ipv4.ttl = ipv4.ttl - 1;\n", "      ipv4.ttl = ipv4.ttl - 1;\n      meta.bit = ipv4.protocol;\n"
    "      ipv4.protocol = meta.bit + 1;\n")


def test_fields_named_like_p4_keywords_are_escaped_and_run(tmp_path):
    """A metadata field ``bit`` and a header field ``int`` are P4 keywords (P4_16 §6.4) the
    grammar never takes as names: the switch program spells them ``bit__``/``int__`` (``type``
    and ``apply`` it takes as field names), its own parser reads it back, and the switch model
    forwards what the reference interpreter forwards."""
    r, out = _build(tmp_path, P4_FIELDS)
    assert r.returncode == 0, r.stderr
    tna = (out / "switch/tna.p4").read_text()
    assert "bit<8> bit__;" in tna and "bit<8> int__;" in tna and "meta.bit__ = hdr.ipv4.protocol" in tna
    assert "bit<8> type;" in tna and "bit<16> apply;" in tna  # names the P4 grammar takes as field names
    assert (out / "switch/lint.txt").read_text() == ""
    for file in ("tna.p4", "v1model.p4"):
        parse_program((out / "switch" / file).read_text())  # the P4 grammar takes every escaped name
    pkt = bytes(Ether() / IP(dst="10.0.0.2", proto=17, ttl=9) / b"data")
    entry = {"match": {"ipv4_dst": "10.0.0.2"}, "values": {"port": 3}}
    got = nfc_run(out, {"fib": [entry]}, {1: [pkt]}, tmp_path / "run")
    it = Interpreter(compile_file(write(tmp_path, P4_FIELDS), "tofino").program)
    it.tables["fib"].insert(Entry((Match(0x0A000002),), {"port": 3}))
    want = it.process(pkt, 1)
    assert want.kind == "forward" and IP(want.data[14:]).proto == 18  # first principles: protocol + 1
    assert got == ({3: Counter([want.data])}, Counter())


@pytest.mark.parametrize(("name", "message"), [
    ("key", "table 'key' is a P4 keyword"), ("apply", "table 'apply' is a P4 keyword"),
    ("meta", "table 'meta' is also a name of the tna switch program's own"),
    ("ig_tm_md", "table 'ig_tm_md' is also a name of the tna switch program's own"),
    ("Counter", "table 'Counter' is also a name of the tna"),
])
def test_a_switch_table_named_like_a_p4_word_is_E014(tmp_path, name, message):
    r, _ = _build(tmp_path, BASE.replace("table fib", f"table {name}").replace("lookup fib", f"lookup {name}"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert re.search(rf":26:1: error\[E014\]: {re.escape(message)}", r.stderr), r.stderr


def test_python_keywords_and_the_runtime_own_names_are_escaped_or_refused(tmp_path):
    """Tables ``none`` and ``class`` and a value field ``self`` give an importable package
    (attributes ``none``/``class_``, classes ``None_``/``Class``, parameter ``self_``); a table
    named ``plan`` would replace the runtime's own attribute: E014."""
    text = BASE.replace("value { port: bit<16>; }", "value { port: bit<16>; self: bit<8>; }")
    text = text.replace("table fib {", "table class { key { ipv4.src: exact; } value { x: bit<8>; } size = 16; }\n"
                        "table none { key { ipv4.src: exact; } value { x: bit<8>; } size = 16; }\ntable fib {")
    text = text.replace("  lookup fib {", "  lookup class { hit(c) { ipv4.ttl = c.x; } }\n"
                        "  lookup none { hit(c) { ipv4.ttl = c.x; } }\n  lookup fib {")
    r, out = _build(tmp_path, text, "dpdk")
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, str(out / "python"))
    try:
        mod = importlib.import_module("t")
    finally:
        sys.path.remove(str(out / "python"))
        sys.modules.pop("t", None)
    assert {"class_", "none", "fib"} <= set(mod.T.__annotations__)
    assert mod.None_.__name__ == "None_" and "self_" in inspect.signature(mod.Fib.add).parameters
    r, _ = _build(tmp_path, BASE.replace("table fib", "table plan").replace("lookup fib", "lookup plan"), "dpdk")
    assert r.returncode == 1 and "error[E014]: table 'plan' would be 'plan' in class T" in r.stderr, r.stderr


def test_tables_whose_python_classes_would_coincide_are_E014(tmp_path):
    text = BASE.replace("table fib {", "table a_b { key { ipv4.src: exact; } value { x: bit<8>; } size = 16; }\n"
                        "table aB { key { ipv4.src: exact; } value { x: bit<8>; } size = 16; }\ntable fib {")
    text = text.replace("  lookup fib {", "  lookup a_b { hit(c) { ipv4.ttl = c.x; } }\n"
                        "  lookup aB { hit(c) { ipv4.ttl = c.x; } }\n  lookup fib {")
    r, _ = _build(tmp_path, text, "dpdk")
    assert r.returncode == 1 and "table 'aB' would be 'AB' in the package module" in r.stderr, r.stderr


def test_the_runtime_names_the_package_avoids_are_all_of_them():
    """RUNTIME_ATTRS lists every public method of Runtime and every attribute its __init__
    sets; MODULE_NAMES every name the template imports or defines."""
    assigned = set(re.findall(r"self\.(\w+)\s*[:=]", inspect.getsource(Runtime.__init__)))
    public = {n for n in dir(Runtime) if not n.startswith("_")} | {a for a in assigned if not a.startswith("_")}
    assert public <= RUNTIME_ATTRS
    template = (ROOT / "targets/pyapi/api.py.j2").read_text()
    imported = set(re.findall(r"^from \S+ import (.+)$", template, re.M)[-1].split(", "))
    imported |= {n for line in re.findall(r"^from \S+ import (.+)$", template, re.M) for n in line.split(", ")}
    assert imported | set(re.findall(r"^def (\w+)", template, re.M)) <= MODULE_NAMES
    assert "type" in p.P4_KEYWORDS and "key" in p.P4_KEYWORDS
