"""Extended sequence numbers across 2^32 (issue 15; RFC 4303 §2.2.1, §3.4.3, Appendix A2),
in the reference interpreter and in the DPDK program (``nfc run`` of tests/corpus/esp_esn.nfp
on a server alone).  The sender is scapy's ESN ``SecurityAssociation`` (its AES-GCM AAD is
SPI . high . low), so nothing here encrypts with the code under test; each packet's verdict
is worked out by hand from Appendix A2.2 in the table below."""

from __future__ import annotations

from collections import Counter

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, IPSecIntegrityError, SecurityAssociation
from scapy.layers.l2 import Ether

from compiler.interp import Entry, Interpreter, Match
from tests.oracles import ip2int
from tests.support import ROOT, build_with_server, compile_ir, needs_dpdk, nfc_run

KEY, SALT, SPI_IN, SPI_OUT, SA = bytes(range(32, 48)), bytes.fromhex("5a17c0de"), 0x3001, 0x4001, 7
PEER, LOCAL, PEER_PORT, TENANT_PORT, OUT_PORT = "198.51.100.9", "203.0.113.9", 0, 4, 2
TOP32 = 1 << 32

# (64-bit number the peer sends, the high 32 bits it encrypts with, verdict).  The window's
# top T and the inference (case A: Tl >= 63; case B: Tl < 63) for each, in order:
INBOUND = [
    (1, 0, "forward"),                   # T=0, B: below 2^32-62 -> Th=0; new
    (2**31, 0, "forward"),               # T=1, B: 2^31 is not >= 2^32-62 -> 0
    (TOP32 - 5, 0, "forward"),           # T=2^31, A: >= Tl-63 -> Th=0
    (TOP32 + 3, 1, "forward"),           # T=2^32-5, A: 3 < Tl-63 -> Th+1=1: across 2^32
    (TOP32 - 2, 0, "forward"),           # T=2^32+3, B: >= 2^32-60 -> Th-1=0; 5 behind, unseen
    (TOP32 + 3, 1, "replayed"),          # B: 3 -> Th=1; seen
    (TOP32 - 5, 0, "replayed"),          # B: -> 0; 8 behind, seen
    (TOP32 + 3, 0, "bad_icv"),           # the sender's high bits wrong: inferred 1, ICV fails
    (TOP32 - 100, 0, "bad_icv"),         # B: not >= 2^32-60 -> Th=1: mis-inferred, ICV fails
    (TOP32 + 70, 1, "forward"),          # B: -> 1; new
    (TOP32 + 8, 1, "forward"),           # T=2^32+70, A: 8 >= 7 -> 1; 62 behind, unseen
    (TOP32 + 6, 1, "bad_icv"),           # A: 6 < 7 -> 2: too old, mis-inferred, ICV fails
]
FIRST_OUT = TOP32 - 2  # the outbound SA's first number: it sends 2^32-2, 2^32-1, 2^32, 2^32+1


def _sa(spi: int, high: int, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=KEY + SALT,  # type: ignore[no-untyped-call]
                               tunnel_header=IP(src=src, dst=dst), esn_en=True, esn=high)


def _inner(i: int) -> bytes:
    return bytes(IP(src="192.168.1.1", dst="10.1.0.1", id=i) / UDP(sport=1000 + i, dport=9) / (b"esn%d" % i))


def _inbound() -> list[bytes]:
    return [bytes(Ether() / _sa(SPI_IN, high, PEER, LOCAL).encrypt(IP(_inner(i)), seq_num=n & 0xFFFFFFFF))
            for i, (n, high, _v) in enumerate(INBOUND)]


def _tenant(i: int) -> bytes:
    return bytes(Ether() / IP(src="10.1.0.1", dst="192.168.1.1", id=i) / UDP(sport=9, dport=2000 + i) / b"out")


KEY_INT, SALT_INT = int.from_bytes(KEY, "big"), int.from_bytes(SALT, "big")
INBOUND_SA = {"key": KEY_INT, "salt": SALT_INT, "sa_index": SA, "port": OUT_PORT}
OUTBOUND_SA = {"spi": SPI_OUT, "key": KEY_INT, "salt": SALT_INT, "first": FIRST_OUT, "counter": 3,
               "src": ip2int(LOCAL), "peer": ip2int(PEER), "port": OUT_PORT}


def _expected_inbound() -> tuple[Counter[bytes], Counter[str]]:
    fwd = Counter(_inner(i) for i, (_n, _h, v) in enumerate(INBOUND) if v == "forward")
    return fwd, Counter(v for _n, _h, v in INBOUND if v != "forward")


def _check_outbound(frames: list[bytes]) -> None:
    """Each number's low 32 bits in the header, the AAD with its high 32 bits: scapy decrypts
    with the right high bits and not with the others."""
    by_seq = {f[ESP].seq: f for f in (Ether(f) for f in frames)}
    assert len(frames) == 4 and len(by_seq) == 4
    for i in range(4):
        n = FIRST_OUT + i
        f = by_seq[n & 0xFFFFFFFF]
        high = n >> 32
        plain = _sa(SPI_OUT, high, LOCAL, PEER).decrypt(f[IP].copy())
        assert bytes(plain) == _tenant(i)[14:]
        with pytest.raises(IPSecIntegrityError):
            _sa(SPI_OUT, high ^ 1, LOCAL, PEER).decrypt(f[IP].copy())


def test_the_interpreter_infers_the_high_bits_and_keeps_the_window_across_2_32():
    it = Interpreter(compile_ir(str(ROOT / "tests/corpus/esp_esn.nfp")))
    it.tables["inbound_sa"].insert(Entry((Match(SPI_IN),), INBOUND_SA))
    it.tables["outbound_sa"].insert(Entry((Match(TENANT_PORT),), OUTBOUND_SA))
    outs = [it.process(f, PEER_PORT) for f in _inbound()]
    assert [o.reason if o.kind == "drop" else o.kind for o in outs] == [v for _n, _h, v in INBOUND]
    assert Counter(bytes(Ether(o.data).payload) for o in outs if o.kind == "forward") == _expected_inbound()[0]
    sent = [it.process(_tenant(i), TENANT_PORT) for i in range(4)]
    assert all(o.kind == "forward" for o in sent)
    _check_outbound([o.data for o in sent])


@needs_dpdk
def test_the_server_infers_the_high_bits_and_keeps_the_window_across_2_32(tmp_path):
    out = build_with_server("tests/corpus/esp_esn.nfp", tmp_path / "out", "--target", "dpdk")
    entries = {"inbound_sa": [{"match": {"esp_spi": SPI_IN}, "values": INBOUND_SA, "priority": 0}],
               "outbound_sa": [{"match": {"std_ingress_port": TENANT_PORT}, "values": OUTBOUND_SA, "priority": 0}]}
    got, drops = nfc_run(out, entries, {PEER_PORT: _inbound()}, tmp_path / "in")
    fwd, want_drops = _expected_inbound()
    assert drops == want_drops
    assert Counter(bytes(Ether(f).payload) for f in got[OUT_PORT].elements()) == fwd
    got, drops = nfc_run(out, entries, {TENANT_PORT: [_tenant(i) for i in range(4)]}, tmp_path / "out_run")
    assert sum(drops.values()) == 0, drops
    _check_outbound(list(got[OUT_PORT].elements()))


@needs_dpdk
def test_headers_a_decryption_invalidated_read_as_invalid_in_its_branches(tmp_path):
    """After ``if (esp_decrypt_esn(..)) { .. esp.seq .. }`` the header is gone: the branch reads
    esp.seq as 0, as the interpreter does (the server once read the stale bytes there)."""
    src = (ROOT / "tests/corpus/esp_esn.nfp").read_text()
    old = """      if (!esp_decrypt_esn(outer, esp, sa.key, sa.salt, meta.high)) {
        drop(bad_icv);
      }
      if (!replay_check_esn(sa.sa_index, meta.seq)) {
        drop(replayed);
      }
      forward(sa.port);"""
    new = """      if (esp_decrypt_esn(outer, esp, sa.key, sa.salt, meta.high)) {
        if (!replay_check_esn(sa.sa_index, meta.high ++ esp.seq)) {
          drop(replayed);
        }
        forward(sa.port);
      } else {
        drop(bad_icv);
      }"""
    assert old in src
    path = tmp_path / "esp_branch.nfp"
    path.write_text(src.replace(old, new))
    it = Interpreter(compile_ir(str(path)))
    it.tables["inbound_sa"].insert(Entry((Match(SPI_IN),), INBOUND_SA))
    frames = _inbound()
    spec = [it.process(f, PEER_PORT) for f in frames]
    want_drops = Counter(o.reason for o in spec if o.kind == "drop")
    assert want_drops["replayed"] > 0  # the window sees sequence number high:0, again and again
    out = build_with_server(str(path), tmp_path / "out", "--target", "dpdk")
    entries = {"inbound_sa": [{"match": {"esp_spi": SPI_IN}, "values": INBOUND_SA, "priority": 0}],
               "outbound_sa": [{"match": {"std_ingress_port": TENANT_PORT}, "values": OUTBOUND_SA, "priority": 0}]}
    got, drops = nfc_run(out, entries, {PEER_PORT: frames}, tmp_path / "run")
    assert drops == want_drops
    assert Counter(f for f in got.get(OUT_PORT, Counter()).elements()) == Counter(
        o.data for o in spec if o.kind == "forward")
