"""ESP with AES-CBC-128 and HMAC-SHA1-96 (issue 15 item 2: "AES-CBC + HMAC-SHA1 as the seed's
benchmark uses, if the PMDs allow"; stdlib/ops.nfp esp_encrypt_cbc / esp_decrypt_cbc), on the
server through DPDK's crypto_aesni_mb, against implementations nobody here wrote:

* what the server encrypts decrypts with scapy's ``SecurityAssociation`` (AES-CBC, HMAC-SHA1-96)
  to the tenant's packet, numbered 1, 2, ... with the IV AES_key(spi . 0 . seq) (checked with
  ``cryptography``'s AES), padding to 16-byte blocks for every remainder;
* what scapy encrypts decrypts through the server to the inner packet;
* a ciphertext or ICV byte changed, a wrong padding under a good ICV, a ciphertext that is not
  whole blocks, and a replay are dropped by reason;
* the reference interpreter does all of it byte for byte alike.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from compiler.interp import Entry, Interpreter, Match
from tests.oracles import ip2int, mac2int
from tests.support import DPDK, build_with_server, compile_file, nfc_cli, nfc_run, reference_outputs, write

pytestmark = DPDK

PLAIN = """parser plain {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: inner_ip; default: drop(not_ipv4); } }
  state inner_ip { extract ipv4; transition accept; }
}
"""
OUTBOUND_SA = """table outbound_sa {
  key { ipv4.dst: lpm; }
  value { spi: bit<32>; key: bit<128> secret; auth_hi: bit<32> secret; auth_lo: bit<128> secret;
          src: bit<32>; dst: bit<32>; port: bit<16>; next_hop: bit<48>; slot: bit<8>; }
  size = 16;
}
"""
PROGRAM = """import "std/headers.nfp";
import "std/ops.nfp";
packet { eth: ethernet; outer: ipv4; esp: esp; ipv4: ipv4; }
metadata { seq: bit<32>; }
""" + PLAIN + """parser protected {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: outer_ip; default: drop(not_ipv4); } }
  state outer_ip { extract outer; transition select(outer.protocol) { IP_ESP: esp_hdr; default: drop(not_esp); } }
  state esp_hdr { extract esp; transition accept; }
}
""" + OUTBOUND_SA + """register sa_seq: bit<32>[16] monotonic;
stage seal {
  lookup outbound_sa {
    hit(sa) {
      if (sa_seq[sa.slot] == 0xffffffff) { drop(sa_seq_exhausted); }
      meta.seq = sa_seq[sa.slot] + 1;
      sa_seq[sa.slot] = meta.seq;
      esp_encrypt_cbc(outer, esp, sa.spi, meta.seq, sa.key, sa.auth_hi, sa.auth_lo, sa.src, sa.dst);
      eth.dst = sa.next_hop;
      forward(sa.port);
    }
    miss { drop(no_sa); }
  }
}
table inbound_sa {
  key { esp.spi: exact; }
  value { key: bit<128> secret; auth_hi: bit<32> secret; auth_lo: bit<128> secret; window: bit<32>;
          port: bit<16>; next_hop: bit<48>; }
  size = 16;
}
stage open {
  lookup inbound_sa {
    hit(sa) {
      meta.seq = esp.seq;
      if (!esp_decrypt_cbc(outer, esp, sa.key, sa.auth_hi, sa.auth_lo)) { drop(bad_icv); }
      if (!replay_check(sa.window, meta.seq)) { drop(replayed); }
      eth.dst = sa.next_hop;
      forward(sa.port);
    }
    miss { drop(unknown_sa); }
  }
}
pipeline encap { ports = [0..1]; parser = plain; stages = [seal]; traffic = 50%; }
pipeline decap { ports = [2]; parser = protected; stages = [open]; traffic = 50%; }
"""

SRC, DST, NH = "203.0.113.1", "198.51.100.7", "02:00:00:00:00:99"
# every SA its own keys (AES-128, HMAC-SHA1's 160 bits): a session cached for the wrong one fails
OUT = [(0x3001, bytes(range(16)), bytes(range(100, 120)), "192.168.9.0/25", 3),  # spi, key, auth, tenants, slot
       (0x3002, bytes(range(16, 32)), bytes(range(120, 140)), "192.168.9.128/25", 4)]
IN = [(0x4001, bytes(range(32, 48)), bytes(range(140, 160)), 5),  # spi, key, auth, window
      (0x4002, bytes(range(48, 64)), bytes(range(160, 180)), 6)]


def _keys(key: bytes, auth: bytes) -> dict[str, int]:
    return {"key": int.from_bytes(key, "big"), "auth_hi": int.from_bytes(auth[:4], "big"),
            "auth_lo": int.from_bytes(auth[4:], "big")}


def _entries() -> dict[str, list[dict[str, object]]]:
    return {"outbound_sa": [{"match": {"ipv4_dst": net}, "values": {
                "spi": spi, **_keys(key, auth), "src": ip2int(SRC), "dst": ip2int(DST), "port": 1,
                "next_hop": mac2int(NH), "slot": slot}} for spi, key, auth, net, slot in OUT],
            "inbound_sa": [{"match": {"esp_spi": spi}, "values": {
                **_keys(key, auth), "window": window, "port": 1, "next_hop": mac2int(NH)}}
                for spi, key, auth, window in IN]}


def _spec(c) -> Interpreter:
    spec = Interpreter(c.program)
    for table, rows in _entries().items():
        names = [v.name for v in c.program.tables[table].values]
        for row in rows:
            (key,) = row["match"].values()  # type: ignore[union-attr]
            m = Match(ip2int(key.split("/")[0]), int(key.split("/")[1])) if isinstance(key, str) else Match(key)
            spec.tables[table].insert(Entry((m,), {n: row["values"][n] for n in names}))  # type: ignore[index]
    return spec


def _sa(spi: int, key: bytes, auth: bytes, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-CBC", crypt_key=key,  # type: ignore[no-untyped-call]
                               auth_algo="HMAC-SHA1-96", auth_key=auth, tunnel_header=IP(src=src, dst=dst))


def _tenant(i: int) -> bytes:
    """To SA 0 (192.168.9.i) and SA 1 (.128 + i) in turn, inner lengths over every remainder mod 16."""
    ip = IP(src="10.8.0.1", dst=f"192.168.9.{i // 2 + (128 if i % 2 else 1)}", id=i) / UDP(sport=7, dport=8) / \
        bytes(range(i))
    return bytes(Ether(src="02:00:00:00:0b:01", dst="02:00:cb:00:71:01") / ip)


def _from_peer(sa: int, seq: int, size: int) -> tuple[bytes, bytes]:
    spi, key, auth, _w = IN[sa]
    inner = bytes(IP(src="192.168.9.9", dst="10.8.0.1", id=seq) / UDP(sport=9, dport=7) / bytes(size))
    enc = _sa(spi, key, auth, DST, SRC).encrypt(IP(inner), seq_num=seq)
    return bytes(Ether(dst="02:00:cb:00:71:01") / enc), inner


def _forged(seq: int, plaintext: bytes, cut: int = 0) -> bytes:
    """An ESP packet of SA 0 with a good ICV over a plaintext of our choosing (a malformed
    trailer), its ciphertext ``cut`` bytes short of whole blocks."""
    spi, key, auth, _w = IN[0]
    iv = bytes(16)
    ct = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor().update(plaintext)
    ct = ct[:len(ct) - cut]
    head = spi.to_bytes(4, "big") + seq.to_bytes(4, "big")
    icv = hmac.new(auth, head + iv + ct, hashlib.sha1).digest()[:12]
    return bytes(Ether(dst="02:00:cb:00:71:01") / IP(src=DST, dst=SRC, proto=50) / (head + iv + ct + icv))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cbc")
    src = write(tmp, PROGRAM)
    return build_with_server(src, tmp / "out", "--target", "dpdk"), compile_file(src, target="dpdk")


def test_cbc_esp_interoperates_both_ways_and_drops_what_it_must(built, tmp_path):
    out, c = built
    # the two SAs in turn within every burst, then 48 to SA 0 alone (runs of one SA: one call each)
    tenants = [_tenant(i) for i in range(1, 65)] + [_tenant(2 * i) for i in range(1, 49)]
    sent = {sa: [t for t in tenants if (int(IP(t[14:]).dst.split(".")[3]) >= 128) == sa] for sa in (0, 1)}
    peer = [_from_peer(seq % 2, seq, size)
            for seq, size in ((1, 0), (2, 1), (3, 14), (4, 15), (5, 100), (6, 1400), (7, 31), (8, 32))]
    bad_ct = bytearray(_from_peer(0, 9, 20)[0])
    bad_ct[-20] ^= 1  # a ciphertext byte
    bad_icv = bytearray(_from_peer(1, 10, 20)[0])
    bad_icv[-1] ^= 1
    bad_pad = _forged(11, bytes(14) + bytes([1, 4]))  # pad length 1 whose pad byte is 0, not 1
    short = _forged(12, bytes(30) + bytes([0, 4]), cut=5)  # a good ICV over a ciphertext of partial blocks
    replay = peer[2][0]
    inputs = {0: tenants, 2: [p for p, _ in peer] + [bytes(bad_ct), bytes(bad_icv), bad_pad, short, replay]}
    got, drops = nfc_run(out, _entries(), inputs, tmp_path)
    assert drops == Counter({"bad_icv": 4, "replayed": 1}), drops
    frames = [Ether(f) for f in got[1].elements()]
    for n, (spi, key, auth, _net, _slot) in enumerate(OUT):
        sealed = sorted((f for f in frames if ESP in f and f[ESP].spi == spi), key=lambda f: f[ESP].seq)
        assert [f[ESP].seq for f in sealed] == list(range(1, len(sent[n]) + 1)) and len(sent[n]) == (80, 32)[n]
        sa = _sa(spi, key, auth, SRC, DST)
        for f, tenant in zip(sealed, sent[n], strict=True):
            assert (f[IP].src, f[IP].dst, f[IP].proto, f.dst) == (SRC, DST, 50, NH)
            assert bytes(sa.decrypt(f[IP].copy())) == tenant[14:]  # scapy: the tenant's packet
            body = bytes(f[IP].payload)  # SPI, seq, IV, ciphertext, ICV
            nonce = spi.to_bytes(4, "big") + bytes(4) + f[ESP].seq.to_bytes(8, "big")
            assert body[8:24] == Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(nonce)
            assert (len(body) - 8 - 16 - 12) % 16 == 0
    opened = sorted(bytes(f[IP]) for f in frames if ESP not in f)
    assert opened == sorted(inner for _, inner in peer)
    # the reference interpreter: the same packets, byte for byte, and the same drops
    want, want_drops = reference_outputs(_spec(c), inputs)
    assert got == want and drops == want_drops


def test_cbc_esp_is_proved_on_the_split_program(tmp_path):
    """nfc verify encodes esp_encrypt_cbc / esp_decrypt_cbc as functions of their own (the key
    material between the sequence number and the addresses): the split program is proved."""
    r = nfc_cli("build", write(tmp_path, PROGRAM), "-o", str(tmp_path / "out"), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    assert "verified 2 of 2 pipelines equal to the spec" in r.stderr, r.stderr


NESTED = """import "std/headers.nfp";
import "std/ops.nfp";
packet { eth: ethernet; o2: ipv4; e2: esp; outer: ipv4; esp: esp; ipv4: ipv4; }
""" + PLAIN + OUTBOUND_SA + """stage twice {
  lookup outbound_sa {
    hit(sa) {
      esp_encrypt_cbc(outer, esp, sa.spi, 7, sa.key, sa.auth_hi, sa.auth_lo, sa.src, sa.dst);
      esp_encrypt_cbc(o2, e2, 9, 8, sa.key, sa.auth_hi, sa.auth_lo, sa.dst, sa.src);
      if (esp_decrypt_cbc(o2, e2, sa.key, sa.auth_hi, sa.auth_lo)) {
        forward(sa.port);
      } else {
        drop(roundtrip);
      }
    }
    miss { drop(no_sa); }
  }
}
pipeline encap { ports = [0..1]; parser = plain; stages = [twice]; traffic = 100%; }
"""


def test_an_esp_in_esp_decrypted_from_the_esp_buffer_matches_the_interpreter(tmp_path):
    """The second encryption gathers into the packet's ESP buffer (the payload is there, its
    header in p->store), and the decryption that follows, not dropping on failure, works from
    that buffer: what comes out is the single ESP packet, byte for byte the interpreter's, and
    scapy decrypts it to the tenant's packet (review: it was dropped)."""
    src = write(tmp_path, NESTED)
    out = build_with_server(src, tmp_path / "out", "--target", "dpdk")
    c = compile_file(src, target="dpdk")
    tenants = [_tenant(i) for i in range(1, 9)]
    entries = {"outbound_sa": _entries()["outbound_sa"]}
    got, drops = nfc_run(out, entries, {0: tenants}, tmp_path / "run")
    spec = Interpreter(c.program)
    names = [v.name for v in c.program.tables["outbound_sa"].values]
    for row in entries["outbound_sa"]:
        net, plen = str(row["match"]["ipv4_dst"]).split("/")  # type: ignore[index]
        spec.tables["outbound_sa"].insert(Entry((Match(ip2int(net), int(plen)),),
                                                {n: row["values"][n] for n in names}))  # type: ignore[index]
    want, want_drops = reference_outputs(spec, {0: tenants})
    assert not drops and got == want, (drops, want_drops)
    for f in (Ether(d) for d in got[1].elements()):
        spi = f[ESP].spi
        (_spi, key, auth, _net, _slot), = [sa for sa in OUT if sa[0] == spi]
        assert bytes(_sa(spi, key, auth, SRC, DST).decrypt(f[IP].copy())) in [t[14:] for t in tenants]


AHEAD = """import "std/headers.nfp";
import "std/ops.nfp";
packet { eth: ethernet; outer: ipv4; esp: esp; ipv4: ipv4; }
metadata { seq: bit<32>; }
parser protected {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: outer_ip; default: drop(not_ipv4); } }
  state outer_ip { extract outer; transition select(outer.protocol) { IP_ESP: esp_hdr; default: drop(not_esp); } }
  state esp_hdr { extract esp; transition accept; }
}
table inbound_sa {
  key { esp.spi: exact; }
  value { key: bit<128> secret; auth_hi: bit<32> secret; auth_lo: bit<128> secret; other_key: bit<128> secret;
          port: bit<16>; }
  size = 16;
}
stage open {
  lookup inbound_sa {
    hit(sa) {
      meta.seq = esp.seq;
      if (meta.seq == 2) {  // a key tried first, its failure not dropped: it decrypts in the ESP buffer
        if (esp_decrypt_cbc(outer, esp, sa.other_key, sa.auth_hi, sa.auth_lo)) { drop(other_key); }
      }
      if (meta.seq == 3) { esp.seq = 77; }  // the header the ICV covers, changed
      if (!esp_decrypt_cbc(outer, esp, sa.key, sa.auth_hi, sa.auth_lo)) { drop(bad_icv); }
      forward(sa.port);
    }
    miss { drop(unknown_sa); }
  }
}
pipeline decap { ports = [0..2]; parser = protected; stages = [open]; traffic = 100%; }
"""


def test_a_decryption_made_ahead_is_taken_only_while_it_holds(tmp_path):
    """Packet 1's decryption decrypts packets 2-6 of its SPI ahead. Packet 2 first tries
    another key, whose failure is not dropped and which decrypts in its ESP buffer, where the
    result made ahead lay; packet 3's program changes its ESP header first: neither may take
    what was made ahead (review: packet 2 went out as garbage), and everything is the
    interpreter's, byte for byte."""
    src = write(tmp_path, AHEAD)
    out = build_with_server(src, tmp_path / "out", "--target", "dpdk")
    c = compile_file(src, target="dpdk")
    spi, key, auth, _w = IN[0]
    values = {**_keys(key, auth), "other_key": int.from_bytes(IN[1][1], "big"), "port": 1}
    peer = [_from_peer(0, seq, 40)[0] for seq in range(1, 7)]
    got, drops = nfc_run(out, {"inbound_sa": [{"match": {"esp_spi": spi}, "values": values}]}, {2: peer},
                         tmp_path / "run")
    spec = Interpreter(c.program)
    names = [v.name for v in c.program.tables["inbound_sa"].values]
    spec.tables["inbound_sa"].insert(Entry((Match(spi),), {n: values[n] for n in names}))
    want, want_drops = reference_outputs(spec, {2: peer})
    assert drops == want_drops == Counter({"bad_icv": 1}) and got == want
    assert sum(got[1].values()) == 5
