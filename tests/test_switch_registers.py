"""Registers on the switch: a stage's accesses of a register as one read-modify-write
(``compiler/register_access.py``), TNA ``Register`` / ``RegisterAction`` and the v1model
``register`` twin, the lint's stateful-ALU rules, P4Runtime ``RegisterEntry`` through the
switch model and the runtime API, and the placement of what a stateful ALU cannot do.

Packets are built with scapy; what a packet must come out as is worked out here from the
``.nfp`` text (the quota of 3 per destination, the TTL remembered per source), and the
differential test (tests/test_differential_examples.py, ``switch_registers``) compares the
switch model with the reference interpreter on fuzzed traffic for every target."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from compiler.interp import Interpreter
from compiler.irprint import print_expr
from compiler.register_access import NotOne, OneAccess, one_access
from nfc._build_dir import open_build
from runtime.api import Runtime
from runtime.errors import InvalidEntry
from targets.p4 import syntax as p
from targets.p4.lint import lint
from targets.p4.parse import parse_program
from targets.p4.printer import print_program
from tests.support import ROOT, P4RuntimeSwitch, compile_ir, nfc_cli, write

SOURCE = ROOT / "tests/corpus/switch_registers.nfp"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("switch_registers") / "out"
    r = nfc_cli("build", str(SOURCE.relative_to(ROOT)), "-o", str(out), "--target", "tofino")
    assert r.returncode == 0, r.stderr
    return out


def _packet(src: str, dst: str, ttl: int = 64) -> bytes:
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src, dst=dst, ttl=ttl) / UDP())


# ---- one read-modify-write per register -----------------------------------------------------------

_HEAD = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
metadata { a: bit<32>; b: bit<32>; }
register r: bit<32>[16];
register q: bit<32>[16];
parser p { state start { extract eth; extract ipv4; transition accept; } }
table t { key { ipv4.dst: exact; } value { v: bit<32>; } size = 16; }
"""


def _access(tmp_path: Path, body: str) -> OneAccess | NotOne:
    src = write(tmp_path, _HEAD + f"stage s {{ {body} forward(1); }}\npipeline m {{ ports = [0..3]; parser = p; "
                                  "stages = [s]; }\n")
    prog = compile_ir(src)
    return one_access(prog, prog.stages["s"].body, "r")


@pytest.mark.parametrize(("body", "guard", "new"), [
    # read only: no write
    ("meta.a = r[ipv4.ttl[3:0]];", None, None),
    # the classic counter
    ("r[0] = r[0] + 1;", None, "(r[0w32] + 1w32)"),
    # through metadata: the value written is the old value plus one, in terms of the values at the read
    ("meta.a = r[1] + meta.b; r[1] = meta.a;", None, "(r[1w32] + meta.b:32)"),
    # a drop before the write: its condition's negation guards the write
    ("if (r[2] == 7) { drop(full); } r[2] = r[2] + 1;", "!(r[2w32] == 7w32)", "(r[2w32] + 1w32)"),
    # the drop in the else arm: the condition itself guards it; verify joins the guard too
    ("meta.a = r[3]; if (meta.b == 1) { eth.src = 5; } else { drop(no); } verify(meta.a != 0, zero); r[3] = meta.b;",
     "((meta.b:32 == 1w32) && (r[3w32] != 0w32))", "meta.b:32"),
    # a condition before the first access is no part of the guard: the ALU runs after it
    ("if (meta.b == 1) { drop(no); } r[4] = r[4] - 1;", None, "(r[4w32] - 1w32)"),
])
def test_a_stages_reads_and_write_become_one_access_with_the_guard_and_value_at_the_read(tmp_path, body, guard, new):
    a = _access(tmp_path, body)
    assert isinstance(a, OneAccess), a
    assert (None if a.guard is None else print_expr(a.guard)) == guard
    assert (None if a.new is None else print_expr(a.new)) == new


@pytest.mark.parametrize(("body", "why"), [
    ("r[0] = 1; meta.a = r[1];", "accessed at two indices"),
    ("if (meta.b == 1) { r[0] = 1; } meta.a = r[0];", "written inside a branch"),
    ("r[0] = 1; r[0] = 2;", "written twice"),
    ("meta.b = 1; meta.a = r[meta.b]; meta.b = 2; r[meta.b] = 3;", "index that may change"),
    ("meta.a = r[meta.b]; meta.b = meta.b + 1; meta.a = r[meta.b];", "index that may change"),
    ("meta.a = r[ipv4.ttl[3:0]]; lookup t { hit(e) { meta.b = e.v; } miss { drop(nope); } } r[ipv4.ttl[3:0]] = 1;",
     "after a statement that may end the packet"),
    ("meta.a = r[0]; if (meta.a == 1) { meta.b = 2; } r[0] = meta.b;", "depends on meta.b"),
    ("r[0] = r[0] << 1;", "depends on"),
    ("r[q[0]] = 1;", "indexed by a register"),
    ("meta.a = r[0]; meta.b = q[1]; if (meta.b == 1) { drop(a); } r[0] = 1;", "computed from q["),
])
def test_what_is_not_one_read_modify_write_is_named(tmp_path, body, why):
    a = _access(tmp_path, body)
    assert isinstance(a, NotOne), a
    assert why in a.reason


@pytest.mark.parametrize(("body", "fields", "widest", "comparisons", "operations"), [
    ("r[0] = r[0] + 1;", (), 32, 0, 1),
    ("r[ipv4.dst[3:0]] = r[ipv4.dst[3:0]] + meta.a + meta.b + bit<32>(ipv4.ttl);",  # the index is no operand
     ("ipv4.ttl", "meta.a", "meta.b"), 32, 0, 3),
    ("meta.a = r[0]; if (eth.src == 5) { drop(a); } r[0] = 1;", ("eth.src",), 48, 1, 0),
    ("meta.a = r[0]; if (meta.a == 1) { drop(a); } if (meta.b == 2) { drop(b); } verify(meta.b != 3, c); r[0] = 1;",
     ("meta.b",), 32, 3, 0),
])
def test_what_one_read_modify_write_asks_of_a_stateful_alu_is_measured(tmp_path, body, fields, widest, comparisons,
                                                                        operations):
    a = _access(tmp_path, body)
    assert isinstance(a, OneAccess), a
    assert (a.shape.fields, a.shape.widest, a.shape.comparisons, a.shape.operations) == (
        fields, widest, comparisons, operations)


def test_a_switch_profile_bounds_the_stateful_alu_and_a_derived_target_may_tighten_it(tmp_path):
    """tofino1.toml: two fields, 32-bit words, two comparisons, one operation; a stage asking for
    more goes to the server, or is E071 naming the bound on a switch alone.  A target derived
    in the program may bound it further (not beyond the hardware: the lint keeps those rules)."""
    head = _HEAD.replace("table t {", "table t_unused {")
    two_ops = write(tmp_path, head + "stage s { r[0] = r[0] + meta.a + meta.b; forward(1); }\n"
                                     "pipeline m { ports = [0..3]; parser = p; stages = [s]; }\n")
    r = nfc_cli("build", two_ops, "-o", str(tmp_path / "o"), "--target", "tofino", "--no-verify")
    assert r.returncode == 1 and "the write to register 'r' of 2 operations in stage 's' is unsupported on " \
        "tofino1: it needs a stateful ALU that takes operations 2" in r.stderr, r.stderr
    two_fields = head + "stage s { r[0] = meta.a + meta.b; forward(1); }\n" \
                        "pipeline m { ports = [0..3]; parser = p; stages = [s]; }\n"
    r = nfc_cli("build", write(tmp_path, two_fields), "-o", str(tmp_path / "o2"), "--target", "tofino", "--no-verify")
    assert r.returncode == 0, r.stderr
    small = two_fields + "target small = tofino1 { salu_fields = 1; }\ndeployment d { switch = small; }\n"
    r = nfc_cli("build", write(tmp_path, small), "-o", str(tmp_path / "o3"), "--target", "tofino", "--no-verify")
    assert r.returncode == 1 and "reading 2 packet fields (meta.a, meta.b) in stage 's' is unsupported on small: " \
        "it needs a stateful ALU that takes fields 2" in r.stderr, r.stderr


# ---- the generated P4 --------------------------------------------------------------------------------


def test_each_register_is_one_register_action_and_reads_back_as_printed(built):
    text = (built / "switch/tna.p4").read_text()
    tree = parse_program(text)
    assert print_program(tree) == text
    ingress = next(d for d in tree.decls if isinstance(d, p.Control) and d.name == "Ingress")
    actions = {i.args[0]: i for i in ingress.locals if isinstance(i, p.Instance) and i.type.name == "RegisterAction"}
    assert set(actions) == {p.Path("hits"), p.Path("ttl_seen"), p.Path("stamp")}
    hits = actions[p.Path("hits")].methods[0]
    assert hits.name == "apply" and [q.direction for q in hits.params] == ["inout", "out"]
    # rv = the old value; the cell + 1 unless the quota is reached (the drop's condition guards the write)
    assert hits.body == (p.Assign(p.Path("rv"), p.Path("value")), p.If(
        p.Un("!", p.Bin("==", p.Path("value"), p.Const(3, 32))),
        (p.Assign(p.Path("value"), p.Bin("+", p.Path("value"), p.Const(1, 32))),)))
    for arch in ("tna", "v1model"):
        found = [e for e in lint(parse_program((built / f"switch/{arch}.p4").read_text()), arch)
                 if e.severity == "error"]
        assert found == [], found


def test_p4info_lists_each_register_with_its_width_and_size(built):
    names = json.loads((built / "switch/name_map.json").read_text())
    for arch in ("tna", "v1model"):
        regs = names[arch]["p4runtime"]["registers"]
        assert {n: (r["bitwidth"], r["size"]) for n, r in regs.items()} == {
            "hits": (32, 256), "ttl_seen": (8, 16), "stamp": (32, 8)}
    info = (built / "switch/tna.p4info.txtpb").read_text()
    assert info.count("registers {") == 3 and "bitwidth: 8" in info


def _mutate(tree: p.Program, fn) -> p.Program:
    def ingress(d: p.Decl) -> p.Decl:
        return fn(d) if isinstance(d, p.Control) and d.name == "Ingress" else d
    return dataclasses.replace(tree, decls=tuple(ingress(d) for d in tree.decls))


def _mutate_v1(tree: p.Program, fn) -> p.Program:
    return dataclasses.replace(tree, decls=tuple(fn(d) if isinstance(d, p.Control) and any(
        isinstance(x, p.Instance) and x.type.name == "register" for x in d.locals) else d for d in tree.decls))


def _with_method_body(c: p.Control, reg: str, body: tuple[p.Stmt, ...]) -> p.Control:
    def one(x):
        if isinstance(x, p.Instance) and x.type.name == "RegisterAction" and x.args == (p.Path(reg),):
            return dataclasses.replace(x, methods=(dataclasses.replace(x.methods[0], body=body),))
        return x
    return dataclasses.replace(c, locals=tuple(one(x) for x in c.locals))


def test_the_lint_rejects_what_a_stateful_alu_or_the_extern_declaration_does_not_allow(built):
    tree = parse_program((built / "switch/tna.p4").read_text())
    v, rv = p.Path("value"), p.Path("rv")

    def codes(prog: p.Program) -> set[str]:
        return {e.code for e in lint(prog, "tna") if e.severity == "error"}
    assert codes(tree) == set()
    # a register action writes only its cell and its result
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.Assign(p.ref("meta.n"), v)))))
    # no multiplier in a stateful ALU
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.Assign(v, p.Bin("*", v, p.Const(3, 32)))))))
    # two PHV inputs at most
    three = p.Bin("+", p.Bin("+", p.ref("meta.n"), p.Cast(p.Bits(32), p.ref("meta.old_ttl"))), p.ref("hdr.ipv4.dst"))
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.Assign(v, p.Bin("+", v, three))))))
    # the abstract method by another name, or with a parameter of the wrong type
    def rename(c: p.Control, name: str = "apply2", width: int = 32) -> p.Control:
        def one(x):
            if isinstance(x, p.Instance) and x.args == (p.Path("hits"),):
                m = x.methods[0]
                return dataclasses.replace(x, methods=(dataclasses.replace(
                    m, name=name, params=(dataclasses.replace(m.params[0], type=p.Bits(width)), m.params[1])),))
            return x
        return dataclasses.replace(c, locals=tuple(one(x) for x in c.locals))
    assert "P4L080" in codes(_mutate(tree, rename))
    assert "P4L080" in codes(_mutate(tree, lambda c: rename(c, "apply", 16)))
    # a register executed twice in a control
    twice = _mutate(tree, lambda c: dataclasses.replace(c, apply=(*c.apply, p.Assign(
        p.ref("meta.nfc_reg_hits"), p.Call(p.ref("hits__access.execute"), (p.Const(0, 32),))))))
    assert "P4L082" in codes(twice)
    # two operations in one assignment; three comparisons; a 48-bit operand
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.Assign(v, p.Bin("+", p.Bin("+", v, p.Const(1, 32)), p.ref("meta.n")))))))
    three = p.Bin("&&", p.Bin("&&", p.Bin("==", v, p.Const(1, 32)), p.Bin("==", v, p.Const(2, 32))),
                  p.Bin("==", v, p.Const(3, 32)))
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.If(three, (p.Assign(v, p.Const(0, 32)),))))))
    assert "P4L081" in codes(_mutate(tree, lambda c: _with_method_body(c, "hits", (
        p.Assign(rv, v), p.If(p.Bin("==", p.ref("hdr.eth.src"), p.Const(1, 48)), (p.Assign(v, p.Const(0, 32)),))))))
    # v1model: a register written at two places
    v1 = parse_program((built / "switch/v1model.p4").read_text())
    write_twice = _mutate_v1(v1, lambda c: dataclasses.replace(c, apply=(*c.apply, p.CallStmt(p.Call(
        p.ref("hits.write"), (p.Const(0, 32), p.Const(0, 32)))))))
    assert "P4L082" in {e.code for e in lint(write_twice, "v1model") if e.severity == "error"}


# ---- the switch model, the P4Runtime endpoint and the runtime API --------------------------------------


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_registers_set_and_read_through_p4runtime_steer_the_packets_as_the_source_says(built, arch):
    sw = P4RuntimeSwitch(built, arch)
    try:
        rt = Runtime(built, switch=sw.client)
        hits, seen = rt.register("hits"), rt.register("ttl_seen")
        # 10.1.0.9 has used 2 of its 3: one more packet goes through, the next is dropped over quota
        hits.write(9, 2)
        assert hits.read(9) == 2
        seen.write(5, 77)
        out = [sw.model.process(_packet("10.0.0.5", "10.1.0.9", ttl=40), 1) for _ in range(2)]
        assert out[0].kind == "forward" and out[1].kind == "drop" and out[1].reason == "over_quota"
        sent = Ether(out[0].data)
        assert sent[IP].ttl == 77  # the TTL remembered for source nibble 5, written through P4Runtime
        assert sent.src == "00:00:00:00:00:03"  # eth.src = the third packet's count
        fixed = sent[IP].copy()
        del fixed.chksum  # scapy recomputes the checksum of the header as sent
        assert sent[IP].chksum == IP(bytes(fixed)).chksum
        assert hits.read_many([9, 10]) == [3, 0]
        assert seen.read(5) == 40  # the packet's own TTL is remembered
        # stamp has 8 cells: source nibble 5 wrote 10.1.0.9 there
        assert rt.register("stamp").read(5) == int.from_bytes(bytes([10, 1, 0, 9]), "big")
        # refused before anything is sent: nothing changes
        with pytest.raises(InvalidEntry):
            hits.write(9, 1 << 32)
        with pytest.raises(InvalidEntry):
            seen.write_many({1: 5, 16: 5})
        assert hits.read(9) == 3 and seen.read(1) == 0
    finally:
        sw.close()


# ---- placement --------------------------------------------------------------------------------------

_SEQUENCE = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
register r: bit<32>[16];
parser p { state start { extract eth; extract ipv4; transition accept; } }
stage twice { r[0] = r[0] + 1; r[0] = r[0] + 1; forward(1); }
pipeline m { ports = [0..3]; parser = p; stages = [twice]; }
target srv = dpdk_server { cores = 1; }
deployment d { switch = tofino1; servers = [srv]; server_ports = [32]; rate = 1Mpps; }
"""


def test_a_register_sequence_the_switch_cannot_run_goes_to_the_server_or_is_named(tmp_path):
    src = write(tmp_path, _SEQUENCE)
    r = nfc_cli("build", src, "-o", str(tmp_path / "alone"), "--target", "tofino")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error[E071]: register 'r' written twice in stage 'twice' is unsupported on tofino1: it needs " \
           "capability 'register_sequence'" in r.stderr, r.stderr
    r = nfc_cli("build", src, "-o", str(tmp_path / "split"), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "split/plan.json").read_text())
    assert {o["name"]: o["placement"] for o in plan["objects"]} == {"r": "server"}


_SHARED = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
metadata { x: bit<32>; }
register cnt: bit<32>[4];
register odd: bit<12>[4];
parser p { state start { extract eth; extract ipv4; transition accept; } }
stage a { cnt[0] = cnt[0] + 1; }
stage b { meta.x = cnt[0]; eth.src = bit<48>(meta.x); forward(1); }
stage c { odd[1] = odd[1] + 1; }
pipeline m { ports = [0..3]; parser = p; stages = [a, b, c]; }
target srv = dpdk_server { cores = 1; }
deployment d { switch = tofino1; servers = [srv]; server_ports = [32]; rate = 1Mpps; }
"""


def test_a_register_two_stages_share_and_a_cell_width_no_alu_keeps_stay_off_the_switch(tmp_path):
    """Each stage alone is one read-modify-write, but two stages share cnt (the switch's copy
    and a server's would diverge; a packet passes one ALU once) and odd has 12-bit cells."""
    src = write(tmp_path, _SHARED)
    r = nfc_cli("build", src, "-o", str(tmp_path / "o"), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "o/plan.json").read_text())
    assert {o["name"]: o["placement"] for o in plan["objects"]} == {"cnt": "server", "odd": "server"}
    r = nfc_cli("build", src, "-o", str(tmp_path / "alone"), "--target", "tofino")
    assert r.returncode == 1 and "register 'cnt' used by stage 'a' and by 'b'" in r.stderr, r.stderr
    assert "the 12-bit cells of register 'odd' in stage 'c' is unsupported on tofino1: it needs registers of " \
        "12-bit cells" in r.stderr, r.stderr


def test_an_index_wider_than_32_bits_is_range_checked_at_its_width(tmp_path):
    src = write(tmp_path, _PROP_HEAD.replace("bit<32>[8]", "bit<32>[16]") +
                "stage s { r[eth.src] = r[eth.src] + 1; eth.dst = bit<48>(r[eth.src]); forward(1); }\n"
                "pipeline m { ports = [0..3]; parser = p; stages = [s]; }\n")
    r = nfc_cli("build", src, "-o", str(tmp_path / "o"), "--target", "tofino", "--no-verify")
    assert r.returncode == 0, r.stderr
    # 0x010000000003 is outside the 16 cells: the reference reads 0 and writes nothing; cut to 32
    # bits it would be cell 3
    packets = [bytes(Ether(src=s, dst="02:00:00:00:00:02") / IP() / UDP())
               for s in ("01:00:00:00:00:03", "00:00:00:00:00:03", "01:00:00:00:00:03", "00:00:00:00:00:03")]
    for arch in ("tna", "v1model"):
        model = open_build(tmp_path / "o", arch)[2]
        dst = [Ether(model.process(d, 1).data).dst for d in packets]
        assert dst == ["00:00:00:00:00:00", "00:00:00:00:00:01", "00:00:00:00:00:00", "00:00:00:00:00:02"], arch


def test_a_table_looked_up_twice_on_the_switch_is_named_not_an_internal_error(tmp_path):
    src = write(tmp_path, _HEAD + "stage s { lookup t { hit(e) { meta.a = e.v; } miss { } } "
                                  "lookup t { hit(e) { meta.b = e.v; } miss { } } forward(1); }\n"
                                  "pipeline m { ports = [0..3]; parser = p; stages = [s]; }\n")
    r = nfc_cli("build", src, "-o", str(tmp_path / "o"), "--target", "tofino")
    assert r.returncode == 1 and "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert "error[E100]" in r.stderr and "a second lookup of table 't' on the switch" in r.stderr, r.stderr


def test_a_register_a_parser_reads_is_named_with_the_parser(tmp_path):
    src = write(tmp_path, _HEAD.replace("extract ipv4;", "extract ipv4; verify(r[0] != 5, bad);") +
                "stage s { r[0] = r[0] + 1; forward(1); }\npipeline m { ports = [0..3]; parser = p; stages = [s]; }\n")
    r = nfc_cli("build", src, "-o", str(tmp_path / "o"), "--target", "tofino")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    want = "error[E071]: register 'r' read in parser 'p' is unsupported on tofino1, which runs the parsers"
    assert want in r.stderr, r.stderr


def test_the_corpus_registers_are_placed_on_the_switch(tmp_path):
    r = nfc_cli("build", str(SOURCE.relative_to(ROOT)), "-o", str(tmp_path / "o"), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "o/plan.json").read_text())
    assert {o["name"]: o["placement"] for o in plan["objects"]} == {
        "hits": "switch", "ttl_seen": "switch", "stamp": "switch"}


# ---- property: what is fused runs on the switch model as the reference runs it ------------------------

_PROP_HEAD = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
metadata { a: bit<32>; b: bit<32>; }
register r: bit<32>[8];
parser p { state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ip); } }
           state ip { extract ipv4; transition accept; } }
"""
_INDEX = st.sampled_from(["ipv4.ttl[2:0]", "ipv4.ttl[3:0]", "meta.b[2:0]", "3", "9"])
_K = st.integers(0, 4)


@st.composite
def _stage(draw: st.DrawFn) -> str:
    i = draw(_INDEX)
    cond = st.sampled_from([f"r[{i}] == {{k}}", "meta.a == {k}", "meta.b > {k}", f"r[{i}] > meta.b"])
    stmt = st.one_of(
        st.builds(lambda k: f"meta.a = r[{i}] + {k};", _K),
        st.builds(lambda k: f"meta.b = meta.a + {k};", _K),
        st.just("meta.a = bit<32>(ipv4.ttl);"),
        st.builds(lambda c, k: "if (" + c.format(k=k) + ") { drop(over); }", cond, _K),
        st.builds(lambda c, k: "if (" + c.format(k=k) + ") { meta.b = 1; } else { drop(under); }", cond, _K),
        st.builds(lambda c, k: "verify(" + c.format(k=k) + ", unmet);", cond, _K),
        st.sampled_from([f"r[{i}] = r[{i}] + 1;", f"r[{i}] = meta.a;", f"r[{i}] = meta.a + meta.b;",
                         f"r[{i}] = 2;", f"r[{i}] = r[{i}] - meta.b;"]),
        st.just("eth.src = bit<48>(meta.a);"),
    )
    body = " ".join(draw(st.lists(stmt, min_size=2, max_size=6)))
    return (f"stage s {{ {body} eth.dst = bit<48>(r[{i}]) ^ bit<48>(meta.b); forward(1); }}\n"
            "pipeline m { ports = [0..3]; parser = p; stages = [s]; }\n")


@settings(max_examples=60 if os.environ.get("NFC_SLOW") else 12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stage=_stage(), ttls=st.lists(st.integers(0, 15), min_size=6, max_size=14))
def test_every_fused_register_stage_runs_on_the_switch_model_as_the_reference_does(tmp_path_factory, stage, ttls):
    """Random stages of reads, writes, drops in one arm, verifies and assignments: each the
    analysis fuses (the build for a Tofino alone succeeds) runs packet for packet as the
    reference interpreter runs it, on the TNA program and on the v1model twin."""
    work = tmp_path_factory.mktemp("regprop")
    src = write(work, _PROP_HEAD + stage)
    r = nfc_cli("build", src, "-o", str(work / "o"), "--target", "tofino", "--no-verify")
    if r.returncode != 0:  # not one read-modify-write, or more than one ALU pass: named, left to the server
        assert "error[E071]" in r.stderr and "register 'r'" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assume(False)
    prog = compile_ir(src)
    packets = [bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", ttl=t) / UDP()) for t in ttls]
    for arch in ("tna", "v1model"):
        spec, model = Interpreter(prog), open_build(work / "o", arch)[2]
        for k, data in enumerate(packets):
            want, got = spec.process(data, 1, now=float(k)), model.process(data, 1, now=float(k))
            assert (got.kind, got.data if got.kind == "forward" else got.reason) == \
                (want.kind, want.data if want.kind == "forward" else want.reason), (arch, k, stage)
