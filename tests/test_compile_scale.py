"""Compile time against the length of a pipeline (issue 47, item 0): the P4 lint's validity
analysis (P4L050 / P4L051, ``targets/p4/lint.py``) does work linear in the statements, and
finds what the analysis that keeps every constant finds.

Work is counted in abstract states run through statements (``validity_work``), never in
seconds: the machine may be loaded.  ``bench/bench_compile.py`` times whole builds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from compiler.lower import lower
from compiler.pipeline import compile_program
from lang import Diagnostics, SourceMap, load
from targets.bmv2.arch import V1Model
from targets.p4 import syntax as p
from targets.p4.lint import lint, validity_work
from targets.p4.lower import lower_switch
from targets.tofino.arch import TNA
from tests.bigprog import long_pipeline

B, T = p.Bits, p.TypeName


def _call(dotted: str, *args: p.Expr) -> p.CallStmt:
    return p.CallStmt(p.Call(p.ref(dotted), args))


def _ip_valid() -> p.Expr:
    return p.Call(p.ref("hdr.ip.isValid"))


def _stage(k: int, decided: int) -> tuple[p.Stmt, ...]:
    """Stage ``k`` the way the generator prints one: a flag set only where hdr.ip is valid
    (``meta.f<k>``, 0 from the parser on), the guarded copy of a field (``nfc_rd_``), and a
    read of hdr.ip where the flag is ``decided``: guarded when 1."""
    flag = p.ref(f"meta.f{k}")
    return (
        p.If(p.Bin("&&", _ip_valid(), p.Bin("==", p.ref("hdr.ip.proto"), p.Const(k, 8))),
             (p.Assign(flag, p.Const(1, 1)),)),
        p.Assign(p.ref("meta.rd"), p.Const(0, 8)),
        p.If(_ip_valid(), (p.Assign(p.ref("meta.rd"), p.ref("hdr.ip.ttl")),)),
        p.If(p.Bin("==", flag, p.Const(decided, 1)), (p.Assign(p.ref("meta.rd"), p.ref("hdr.ip.proto")),)),
    )


def chain(stages: int, decided: int = 1) -> p.Program:
    """A v1model program whose ingress runs ``stages`` stages (``_stage``).  Keeping every
    constant, the states hold each flag's 0 or 1: 2^stages of them by the end."""
    hm = (p.Param("inout", T("headers_t"), "hdr"), p.Param("inout", T("metadata_t"), "meta"))
    sm = p.Param("inout", T("standard_metadata_t"), "sm")
    init = tuple(p.Assign(p.ref(f"meta.f{k}"), p.Const(0, 1)) for k in range(stages))
    parser = p.Parser("P", (p.Param("", T("packet_in"), "pkt"), p.Param("out", T("headers_t"), "hdr"),
                            p.Param("inout", T("metadata_t"), "meta"), sm), (), (
        p.State("start", (*init, _call("pkt.extract", p.ref("hdr.eth"))), (p.ref("hdr.eth.type"),),
                (p.Case((p.Const(0x800, 16),), "parse_ip"), p.Case((p.Default(),), "accept"))),
        p.State("parse_ip", (_call("pkt.extract", p.ref("hdr.ip")),))))
    body = tuple(s for k in range(stages) for s in _stage(k, decided))
    return p.Program(("#include <core.p4>", "#include <v1model.p4>"), (
        p.HeaderType("eth_h", (("dst", B(48)), ("src", B(48)), ("type", B(16)))),
        p.HeaderType("ip_h", (("ttl", B(8)), ("proto", B(8)))),
        p.Struct("headers_t", (("eth", T("eth_h")), ("ip", T("ip_h")))),
        p.Struct("metadata_t", (*((f"f{k}", B(1)) for k in range(stages)), ("rd", B(8)))),
        parser, p.Control("Vr", hm, (), ()), p.Control("Ig", (*hm, sm), (), body),
        p.Control("Eg", (*hm, sm), (), ()), p.Control("Ck", hm, (), ()),
        p.Control("Dp", (p.Param("", T("packet_out"), "pkt"), p.Param("in", T("headers_t"), "hdr")), (),
                  (_call("pkt.emit", p.ref("hdr.eth")), _call("pkt.emit", p.ref("hdr.ip")))),
        p.Instance(T("V1Switch"), tuple(p.Call(p.Path(n)) for n in ("P", "Vr", "Ig", "Eg", "Ck", "Dp")), "main"),
    ))


def test_the_work_grows_linearly_with_the_stages():
    work = {n: validity_work(chain(n), "v1model") for n in (8, 16, 32, 64)}
    for n in (16, 32, 64):
        assert work[n] <= 2.2 * work[n // 2], work
    assert lint(chain(64), "v1model") == []


def test_keeping_every_constant_the_work_is_exponential():
    """What the test above guards against: the states the analysis once kept."""
    exact = {n: validity_work(chain(n), "v1model", exact=True) for n in (4, 8)}
    assert exact[8] > 8 * exact[4], exact
    assert validity_work(chain(8), "v1model") < exact[8] / 4


@pytest.mark.parametrize("decided", [1, 0])
def test_the_chain_is_linted_as_with_every_constant(decided):
    prog = chain(6, decided)
    found = lint(prog, "v1model")
    assert found == lint(prog, "v1model", exact=True)
    # flag 0 also holds where hdr.ip is invalid: the stages' reads are reported (one place, one finding)
    assert [(e.code, e.name) for e in found] == ([] if decided else [("P4L050", "hdr.ip")])
    if not decided:
        assert "hdr.ip.proto is read" in found[0].message


# ---- tests/bigprog.py long_pipeline ----------------------------------------------------------


def _ir(text: str, tmp_path: Any) -> Any:
    path = tmp_path / "long.nfp"
    path.write_text(text)
    diags = Diagnostics()
    checked = load(str(path), diags, SourceMap())
    assert not [d for d in diags.items if d.severity.value == "error"]
    return checked


@pytest.mark.parametrize("stages", [1, 7, 40])
def test_a_long_pipeline_has_the_stages_asked_for(stages, tmp_path):
    prog = lower(_ir(long_pipeline(stages), tmp_path))
    assert len(prog.pipelines) == 1 and len(prog.pipelines[0].stages) == stages
    assert len(prog.tables) <= 64  # what the DPDK server holds
    if stages == 40:  # past the tables' 64 words of values: the lookups stop at stage 30
        assert prog.pipelines[0].stages[30:] == tuple(f"vxlan_encap_{i}" for i in range(30, 40))


def _unguarded(node: Any) -> Any:
    """``node`` with every ``h.isValid() && c`` reduced to ``c`` and every ``if (h.isValid())
    { ... }`` without an else to its body."""
    if isinstance(node, tuple):
        out: list[Any] = []
        for x in (_unguarded(x) for x in node):
            guard = isinstance(x, p.If) and not x.orelse and isinstance(x.cond, p.Call) \
                and isinstance(x.cond.target, p.Member) and x.cond.target.field == "isValid"
            out += list(x.then) if guard else [x]
        return tuple(out)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: _unguarded(getattr(node, f.name)) for f in dataclasses.fields(node)}
        node = dataclasses.replace(node, **changes)
        if isinstance(node, p.Bin) and node.op == "&&" and isinstance(node.left, p.Call) \
                and isinstance(node.left.target, p.Member) and node.left.target.field == "isValid":
            return node.right
    return node


def test_a_long_pipeline_is_linted_as_with_every_constant(tmp_path):
    """The switch part of a 14-stage long pipeline (its cuts and bridges as the partitioner
    places them), and the same with its validity guards removed: the same findings, parser
    paths included, as the analysis that keeps every constant, for a fraction of its work."""
    diags = Diagnostics()
    c = compile_program(_ir(long_pipeline(14), tmp_path), "tofino+dpdk", diags)
    targets = c.need_targets()
    assert c.placement is not None
    for arch in (TNA(1), V1Model()):
        prog, _ = lower_switch(c.need_program(), c.placement, c.bridges, targets.server_ports, arch)
        assert [e for e in lint(prog, arch.name) if e.severity == "error"] == []
        bare = _unguarded(prog)
        found = lint(bare, arch.name)
        assert "P4L050" in {e.code for e in found}
        assert found == lint(bare, arch.name, exact=True)
        assert lint(prog, arch.name) == lint(prog, arch.name, exact=True)
        assert validity_work(prog, arch.name) < validity_work(prog, arch.name, exact=True) / 2
