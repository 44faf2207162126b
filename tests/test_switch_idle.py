"""Idle time of switch caches (issue 14 item 1, switch half): a cached table carries its
architecture's idle-time property (TNA ``idle_timeout``, v1model ``support_timeout``), its
P4Info says NOTIFY_CONTROL, the switch model keeps each entry's time since its last hit, and
the runtime's P4Runtime client reads it as a controller would (``time_since_last_hit``,
P4Runtime §9.1.10)."""

from __future__ import annotations

import ipaddress
import json
import time

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, serve
from runtime.errors import ChannelError
from runtime.p4runtime import SwitchClient, SwitchUpdate
from targets.p4.lint import lint
from targets.p4.parse import parse_program
from tests.support import ROOT, nfc_cli

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
A, B, SRC = 0x0A000001, 0x0A000002, 0xC0000201


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("idle")
    out = tmp / "out"
    r = nfc_cli("build", str(PROGRAM.relative_to(ROOT)), "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    return out


def _table_text(p4: str, name: str) -> str:
    start = p4.index(f"table {name} {{")
    return p4[start:p4.index("\n    }", start)]


@pytest.mark.parametrize(("arch", "prop"), [("tna", "idle_timeout"), ("v1model", "support_timeout")])
def test_a_switch_cache_keeps_idle_time_and_says_so_in_p4info(built, arch, prop):
    p4 = (built / f"switch/{arch}.p4").read_text()
    assert f"{prop} = true;" in _table_text(p4, "hosts")
    assert "timeout" not in _table_text(p4, "acl")  # not a cache: nothing to evict
    info = text_format.Parse((built / f"switch/{arch}.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    behaviour = {t.preamble.alias: t.idle_timeout_behavior for t in info.tables}
    assert behaviour == {"hosts": p4info_pb2.Table.NOTIFY_CONTROL, "acl": p4info_pb2.Table.NO_TIMEOUT}


def test_the_lint_refuses_another_architectures_idle_property(built):
    p4 = (built / "switch/tna.p4").read_text().replace("idle_timeout = true;", "support_timeout = true;")
    found = [e for e in lint(parse_program(p4), "tna") if e.code == "P4L060"]
    assert found and "idle-time property of table hosts must be idle_timeout on tna" in found[0].message


def _frame(dst: int) -> bytes:
    ip = IP(src=str(ipaddress.IPv4Address(SRC)), dst=str(ipaddress.IPv4Address(dst)))
    return bytes(Ether(dst="02:00:00:00:00:01") / ip / UDP() / b"x")


def test_the_client_reads_each_entrys_time_since_its_last_hit(built):
    model = SwitchModel.from_build(built)
    names = json.loads((built / "switch/name_map.json").read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"))
    client = SwitchClient(f"127.0.0.1:{port}", names, "tna", p4info=built / "switch/tna.p4info.txtpb")
    try:
        errors = client.write([SwitchUpdate("add", "acl", {"ipv4_src": (SRC, None)}, {"ok": 1}),
                               *[SwitchUpdate("add", "hosts", {"ipv4_dst": (d, None)}, {"port": 3}) for d in (A, B)]])
        assert errors == [None, None, None]
        time.sleep(0.4)
        out = model.process(_frame(A), 1)
        assert (out.kind, out.port) == ("forward", 3)
        idle = {m["ipv4_dst"][0]: ns for m, _prio, ns in client.idle("hosts")}
        with pytest.raises(ChannelError, match="keeps no idle time"):
            list(client.idle("acl"))
    finally:
        client.close()
        grpc_server.stop(0)
    assert idle[A] < 0.2e9 <= 0.4e9 <= idle[B]  # A just hit; B idle since it was written


def test_the_switch_reports_an_entry_idle_past_its_timeout_once_per_idle_spell(built):
    """§9.1.10: an entry written with ``idle_timeout_ns`` is reported in an
    IdleTimeoutNotification once it has not been hit for that long; not again while it stays
    idle; again after a hit and a new idle spell.  An entry without a timeout never is."""
    model = SwitchModel.from_build(built)
    names = json.loads((built / "switch/name_map.json").read_text())
    p4rt = P4RuntimeServer(model, names, "tna")
    grpc_server, port = serve(p4rt)
    client = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    C = 0x0A000003
    try:
        ups = [SwitchUpdate("add", "hosts", {"ipv4_dst": (d, None)}, {"port": 3}, 0, 500_000_000) for d in (A, B)]
        ups.append(SwitchUpdate("add", "hosts", {"ipv4_dst": (C, None)}, {"port": 3}))  # no timeout
        assert client.write(ups) == [None, None, None]
        idle_reads = {m["ipv4_dst"][0]: ns for m, _p, ns in client.idle("hosts")}
        assert all(ns < 500_000_000 for ns in idle_reads.values())
        def hit_a_for(seconds: float) -> None:  # A is hit every 20 ms; B and C are not
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                p4rt.inject(1, _frame(A))
                time.sleep(0.02)

        # the timeout is long beside the hits' spacing and each wait long beside the timeout, so
        # a loaded CI neither lets A go idle nor reports B late
        hit_a_for(1.2)
        first = client.idle_expired()
        hit_a_for(0.6)
        still = client.idle_expired()  # B stayed idle: not reported again
        p4rt.inject(1, _frame(B))
        hit_a_for(1.2)
        again = client.idle_expired()  # B's new idle spell
    finally:
        client.close()
        grpc_server.stop(0)
    assert [(t, m["ipv4_dst"][0]) for t, m, _p in first] == [("hosts", B)]
    assert still == []
    assert [m["ipv4_dst"][0] for _t, m, _p in again] == [B]


def test_a_rolled_back_batch_does_not_put_off_an_idle_entrys_notification(built):
    """A ROLLBACK_ON_ERROR batch that fails (§12.2) leaves the table as it was, and so the idle
    times: an entry idle since before the batch is reported when its timeout runs out, not a
    timeout after the failed batch (the rollback used to reschedule every entry's look at it);
    the entry the batch inserted and took back is never reported."""
    import grpc
    from p4.v1 import p4runtime_pb2

    model = SwitchModel.from_build(built)
    names = json.loads((built / "switch/name_map.json").read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"))
    client = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    D = 0x0A000004
    try:
        # The timeout is long beside the batch's delay so the two due times (2 s after the write;
        # 2 s after the batch, had the rollback rescheduled it) are far apart under a loaded CI.
        timeout_ns, batch_after = 2_000_000_000, 1.5
        written = time.monotonic()
        assert client.write([SwitchUpdate("add", "hosts", {"ipv4_dst": (B, None)}, {"port": 3}, 0,
                                          timeout_ns)]) == [None]
        time.sleep(batch_after)
        batch = time.monotonic()
        req = p4runtime_pb2.WriteRequest(device_id=client.device_id,
                                         atomicity=p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR)
        req.election_id.high, req.election_id.low = client.election
        for dst in (D, B):  # B again: ALREADY_EXISTS, so D is taken back too
            up = req.updates.add()
            up.type = p4runtime_pb2.Update.INSERT
            client._table_entry(up.entity.table_entry,
                                SwitchUpdate("add", "hosts", {"ipv4_dst": (dst, None)}, {"port": 3}, 0, timeout_ns))
        with pytest.raises(grpc.RpcError):
            client.stub.Write(req)
        reported: list[int] = []
        while not reported and time.monotonic() < written + 10:
            reported += [m["ipv4_dst"][0] for _t, m, _p in client.idle_expired()]
            time.sleep(0.01)
        received = time.monotonic()
        time.sleep(max(0.0, batch + timeout_ns / 1e9 + 0.3 - time.monotonic()))  # D, had it stayed, is due
        later = [m["ipv4_dst"][0] for _t, m, _p in client.idle_expired()]
    finally:
        client.close()
        grpc_server.stop(0)
    assert reported == [B] and later == []
    # reported on its own schedule, before the batch's would have been due
    assert received < batch + timeout_ns / 1e9, (received - written, batch - written)
