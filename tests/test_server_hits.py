"""The server counts the hits of switch-cached tables (issue 14 item 1, server half): a
packet reaches the server's lookup of a cached table because the switch missed, so these
are the keys to promote.  Packets made by the split reference (what the switch sends the
server when its cache is empty) go into the server program (under ASan + UBSan); the control
channel's HITS must give, per key, exactly the packets sent for it."""

from __future__ import annotations

import ipaddress
import random
import time
from collections import Counter

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.switchmodel import SwitchReference
from runtime.errors import RuntimeApiError
from tests.packet_fuzz import write_pcap
from tests.support import DPDK, ROOT, compile_file, nfc_cli, run_harness, run_make

pytestmark = DPDK

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
HOSTS = [0x0A000001 + 7 * i for i in range(12)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hits")
    src = str(PROGRAM)
    out = tmp / "out"
    r = nfc_cli("build", src, "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    r = run_make(out / "server", "nf-san")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, compile_file(src)


def _to_server(c, dsts: list[int]) -> list[bytes]:
    """What the switch, its cache empty, sends the server for a packet to each of ``dsts``."""
    ref = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports)
    out = []
    for d in dsts:
        pkt = Ether(dst="02:00:00:00:00:01") / IP(src="192.0.2.1", dst=str(ipaddress.IPv4Address(d))) / UDP() / b"x"
        o = ref.process(bytes(pkt), 1)
        assert o.kind == "forward" and o.port == 16, o
        out.append(o.data)
    return out




def test_hits_count_every_server_lookup_of_a_cached_table_per_key(built, tmp_path, monkeypatch):
    from runtime.server_proc import ServerProcess

    out, c = built
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    rnd = random.Random(3)
    sent = Counter({h: 3 * (len(HOSTS) - i) for i, h in enumerate(HOSTS)})  # distinct, Zipf-like counts
    unknown = [0x0B000000 + i for i in range(5)]  # not in the table: misses, never counted
    dsts = [h for h, n in sent.items() for _ in range(n)] + unknown * 4
    rnd.shuffle(dsts)
    write_pcap(tmp_path / "in.pcap", _to_server(c, dsts))
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    with ServerProcess(out / "server/nf-san", attach=[dev]) as srv:
        ch = srv.control
        assert ch.tables["hosts"].tracked and not ch.tables["acl"].tracked
        ch.write("add", "hosts", [[h, 20 + i] for i, h in enumerate(HOSTS)])
        ch.start()
        deadline = time.monotonic() + 30
        while ch.counters()["tables"]["hosts"]["hits"] + ch.counters()["tables"]["hosts"]["misses"] < len(dsts):
            assert time.monotonic() < deadline, ch.counters()
            time.sleep(0.05)
        hits = ch.hits("hosts")
        again = ch.hits("hosts")
        with pytest.raises(RuntimeApiError, match="not tracked"):
            ch.hits("acl")
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    assert hits.counts == Counter({(h,): n for h, n in sent.items()})
    assert (hits.not_kept, hits.lost_in_logs) == (0, 0)
    assert not again.counts  # a HITS takes the counts
    top = [k[0] for k, _ in hits.counts.most_common(3)]
    assert top == HOSTS[:3]


def test_a_writer_lapping_its_log_loses_samples_but_never_miscounts_one(tmp_path):
    """tests/c/hits_check.c: one lcore notes 2M hits, each of its own key, as fast as it can
    while the other takes the counts (the control thread's part): the log laps, so samples
    are lost; each is counted once under its own key or counted as lost, never twice and
    never as a mix of two (a sample overwritten while it was copied is lost)."""
    from tests.support import sanitized_harness

    harness = sanitized_harness(ROOT / "tests/c/hits_check.c",
                                ["nfc_hits.c", "nfc_tables.c", "nfc_state.c", "nfc_values.c", "nfc_lpm.c", "nfc_acl.c"],
                                tmp_path / "hits_check")
    r = run_harness(harness, "0,1", "2000000")
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    counted, lost, bad = map(int, r.stdout.split()[1:])
    assert counted + lost == 2_000_000 and bad == 0 and counted > 0
