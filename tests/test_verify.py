"""nfc verify: Z3 proves the placed programs equal to their spec, and rejects placed programs
broken on purpose — each with a counterexample that, replayed concretely (the reference
interpreter on the spec; the switch model and the server part on the broken placed
program), really gives a different outcome.  A checker never seen to fail proves nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler import ir
from compiler.interp import Entry, Interpreter, Match
from compiler.placement import Direction
from compiler.verify.partition_eq import Counterexample, verify_partition
from emulator.switchmodel.reference import SwitchReference
from emulator.switchmodel.server_ref import ServerReference
from tests.support import ROOT, compile_file, nfc_cli, run_split, write

SUPPORTED = ["vpn_gateway", "cgnat", "bluebird_tor", "dsr_router", "ipsec_gateway"]


@pytest.fixture(scope="module")
def vpn():
    return compile_file(str(ROOT / "examples/vpn_gateway.nfp"))


@pytest.mark.parametrize("example", SUPPORTED)
def test_examples_are_proved(example):
    c = compile_file(str(ROOT / f"examples/{example}.nfp"))
    results = verify_partition(c.program, c.placement, c.bridges)
    assert results and all(r.proved for r in results), [(r.pipeline, r.what) for r in results]


def _replay(c, placed: ir.Program, bridges, cex: Counterexample):
    """The counterexample's packet and tables through the spec and the broken placed program."""
    spec = Interpreter(c.program)
    switch = SwitchReference(placed, c.placement, bridges, c.targets.server_ports)
    server = ServerReference(placed, c.placement, bridges, c.targets.server_ports[0])
    for name, rows in cex.tables.items():
        t = c.program.tables[name]
        for key, values in rows:
            if values is None:
                continue
            match = tuple(Match(v, k.expr.width) if k.match == "lpm" else
                          Match(v, (1 << k.expr.width) - 1) if k.match == "ternary" else
                          Match(v, v) if k.match == "range" else Match(v) for v, k in zip(key, t.keys, strict=True))
            e = Entry(match, values)
            spec.tables[name].insert(e)
            if name in server.tables:
                server.tables[name].insert(e)
            if name in switch.tables and (not t.hints.cache or key in cex.cached.get(name, [])):
                switch.tables[name].insert(e)
    return spec.process(cex.packet, cex.port), run_split(switch, server, cex.packet, cex.port)


def _stage(prog: ir.Program, name: str, body: tuple[ir.Stmt, ...]) -> ir.Program:
    return replace(prog, stages={**prog.stages, name: replace(prog.stages[name], body=body)})


def _narrow_vni(c):
    return c.program, tuple(replace(b, fields=tuple(replace(f, width=f.width - 1) if f.name == "meta.vni" else f
                                                    for f in b.fields))
                            if b.direction is Direction.TO_SWITCH else b for b in c.bridges)


def _swap_dependent_stages(c):
    pl = [replace(p, stages=("qinq_terminate", "overlay_route", "underlay_route", "vxlan_encap"))
          if p.name == "customer_to_cloud" else p for p in c.program.pipelines]
    return replace(c.program, pipelines=tuple(pl)), c.bridges


def _lose_write_before_bridge(c):
    def writes_overlay(s: ir.Stmt) -> bool:
        return isinstance(s, ir.Assign) and isinstance(s.target, ir.MetaField) and s.target.name == "overlay"

    body = tuple(s for s in c.program.stages["qinq_terminate"].body if not writes_overlay(s))
    return _stage(c.program, "qinq_terminate", body), c.bridges


def _drop_validity_bit(c):
    return c.program, tuple(replace(b, valid_bits=tuple(i for i in b.valid_bits if i != "ipv4"),
                                    required=tuple(i for i in b.required if i != "ipv4"))
                            if b.direction is Direction.TO_SERVER else b for b in c.bridges)


def _drop_becomes_forward(c):
    (lk,) = c.program.stages["underlay_route"].body
    assert isinstance(lk, ir.Lookup)
    fwd = ir.Forward(ir.Const(7, 16, lk.span), lk.span)
    return _stage(c.program, "underlay_route", (replace(lk, miss=(fwd,)),)), c.bridges


def _miss_branch_on_hit(c):
    (lk,) = c.program.stages["vxlan_decap"].body
    assert isinstance(lk, ir.Lookup)
    return _stage(c.program, "vxlan_decap", (replace(lk, hit=lk.miss, miss=lk.hit),)), c.bridges


@pytest.mark.parametrize("mutate", [_narrow_vni, _swap_dependent_stages, _lose_write_before_bridge,
                                    _drop_validity_bit, _drop_becomes_forward, _miss_branch_on_hit],
                         ids=lambda f: f.__name__.strip("_"))
def test_broken_placements_are_rejected_with_a_real_counterexample(vpn, mutate):
    placed, bridges = mutate(vpn)
    results = verify_partition(vpn.program, vpn.placement, bridges, placed=placed)
    bad = [r for r in results if not r.proved]
    assert bad, "the mutation went unnoticed"
    cex = bad[0].counterexample
    assert cex is not None, bad[0].what
    want, got = _replay(vpn, placed, bridges, cex)
    assert (want.kind, want.port, want.data, want.reason) != (got.kind, got.port, got.data, got.reason), cex


def test_broken_miss_path_bridge_is_rejected():
    c = compile_file(str(ROOT / "examples/bluebird_tor.nfp"))
    bridges = tuple(replace(b, fields=tuple(f for f in b.fields if f.name != "meta.vrf"))
                    if b.miss is not None and b.direction is Direction.TO_SERVER else b for b in c.bridges)
    assert bridges != c.bridges
    results = verify_partition(c.program, c.placement, bridges)
    bad = [r for r in results if not r.proved]
    assert bad and bad[0].counterexample is not None
    want, got = _replay(c, c.program, bridges, bad[0].counterexample)
    assert (want.kind, want.port, want.data, want.reason) != (got.kind, got.port, got.data, got.reason)


def test_nfc_verify_cli(tmp_path):
    out = tmp_path / "out"
    r = nfc_cli("build", "examples/vpn_gateway.nfp", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "verified" in r.stderr
    r = nfc_cli("verify", str(out))
    assert r.returncode == 0, r.stderr
    assert "customer_to_cloud: proved" in r.stdout and "cloud_to_customer: proved" in r.stdout


def test_a_bridge_that_forgets_whether_the_egress_was_chosen_is_not_equal():
    """The egress port chosen before a cut crosses with a bit saying it was chosen (port 0 is a
    port).  Without the bit the server cannot tell "port 0" from "none" (issue 17: it sent such
    packets back to port 0); verify must see that, and replaying its counterexample through the
    split reference must show the difference."""
    c = compile_file(str(ROOT / "tests/corpus/egress_before_cut.nfp"))
    assert all(r.proved for r in verify_partition(c.program, c.placement, c.bridges))
    assert all({"egress_port", "egress_set"} <= {f.name for f in b.fields} for b in c.bridges)
    bridges = tuple(replace(b, fields=tuple(f for f in b.fields if f.name != "egress_set")) for b in c.bridges)
    (r,) = verify_partition(c.program, c.placement, bridges)
    assert not r.proved and r.counterexample is not None, r.what
    want, got = _replay(c, c.program, bridges, r.counterexample)
    assert (want.kind, want.port, want.reason) != (got.kind, got.port, got.reason), r.counterexample


@pytest.mark.parametrize("body", ["let b: bool = ipv4.ttl > 3; if (b) { ipv4.dscp = r.dscp; }",
                                  "ipv4.dscp = r.dscp + bit<6>(ipv4.ttl == 0);"])
def test_booleans_stored_or_cast_as_bits_are_encoded(tmp_path, body):
    """A bool local and a comparison cast to bits become 0/1 bit-vectors in the proof's own Z3
    context (issue 17: 'Context mismatch', an internal error in nfc build)."""
    src = (ROOT / "tests/corpus/egress_before_cut.nfp").read_text()
    src = src.replace("hit(r) { ipv4.dscp = r.dscp; }", f"hit(r) {{ {body} }}")
    assert body in src
    c = compile_file(write(tmp_path, src))
    assert all(r.proved for r in verify_partition(c.program, c.placement, c.bridges))


# ---- ESP, registers and anti-replay windows (issue 15 item 6) -------------------------------------

@pytest.fixture(scope="module")
def ipsec():
    return compile_file(str(ROOT / "examples/ipsec_gateway.nfp"))


def _in_sa_hit(c, stage: str, change) -> ir.Program:
    """The stage's one lookup with ``change`` applied to its hit branch."""
    (lk,) = c.program.stages[stage].body
    assert isinstance(lk, ir.Lookup)
    return _stage(c.program, stage, (replace(lk, hit=change(lk.hit)),))


def _encrypt_the_next_number(hit):
    """esp_encrypt given meta.seq + 1: the header and the ciphertext differ."""
    *rest, enc = hit
    assert isinstance(enc, ir.Eval) and isinstance(enc.expr, ir.ExternCall) and enc.expr.name == "esp_encrypt"
    seq = enc.expr.args[3]
    bumped = ir.Binary("+", seq, ir.Const(1, seq.width, seq.span), seq.width, seq.span)
    return (*rest, replace(enc, expr=replace(enc.expr, args=(*enc.expr.args[:3], bumped, *enc.expr.args[4:]))))


def _window_moves_before_the_icv(hit):
    """RFC 4303 §3.4.3: the window moves only after the ICV verified; swapped, a forged packet
    moves it (a state difference, and a replayed forgery's reason)."""
    a, decrypt, replay, *rest = hit
    return (a, replay, decrypt, *rest)


def _sequence_number_kept_elsewhere(hit):
    """sa_seq written at the next tunnel's index: the next packet would reuse a number."""
    out = []
    for s in hit:
        if isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead):
            idx = s.target.index
            s = replace(s, target=replace(s.target, index=ir.Binary("+", idx, ir.Const(1, idx.width, idx.span),
                                                                    idx.width, idx.span)))
        out.append(s)
    return tuple(out)


@pytest.mark.parametrize(("stage", "change"), [("esp_outbound", _encrypt_the_next_number),
                                               ("esp_inbound", _window_moves_before_the_icv),
                                               ("esp_outbound", _sequence_number_kept_elsewhere)],
                         ids=lambda v: v if isinstance(v, str) else v.__name__.strip("_"))
def test_broken_esp_state_and_crypto_are_rejected(ipsec, stage, change):
    placed = _in_sa_hit(ipsec, stage, change)
    bad = [r for r in verify_partition(ipsec.program, ipsec.placement, ipsec.bridges, placed=placed) if not r.proved]
    assert bad and bad[0].counterexample is not None, [r.what for r in bad] or "the mutation went unnoticed"
