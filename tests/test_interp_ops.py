"""The interpreter on every action: lookups of each match kind (against independent
references), arithmetic, control flow, hashing, drop/punt/verify, counters, meters,
registers, data-plane state with timeouts, port allocation, anti-replay and ESP
(checked by scapy's independent ESP implementation)."""

from __future__ import annotations

import ipaddress
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from compiler import ir
from compiler.interp import Entry, Interpreter, Match, MeterConfig, TableError
from tests.oracles import crc16_arc
from tests.support import compile_ir

HEAD = """import "std/headers.nfp";
import "std/ops.nfp";
packet { eth: ethernet; outer: ipv4; esp: esp; ip: ipv4; udp: udp; }
metadata { a: bit<8>; b: bit<8>; w: bit<32>; port: bit<16>; }
parser p { state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: accept; } }
           state v4 { extract ip; transition select(ip.protocol) { IP_UDP: u; default: accept; } }
           state u { extract udp; transition accept; } }
"""


def interp(tmp_path: Path, body: str, stages: str = "s1") -> Interpreter:
    path = tmp_path / "o.nfp"
    path.write_text(HEAD + body + f"\npipeline main {{ ports = [0..15]; parser = p; stages = [{stages}]; }}\n")
    return Interpreter(compile_ir(str(path)))


def ip_pkt(src="10.0.0.1", dst="10.0.0.2", **kw) -> bytes:
    return bytes(Ether() / IP(src=src, dst=dst, **kw) / UDP(sport=1000, dport=2000) / b"payload")


# ---- lookups -----------------------------------------------------------------------------

FIB = """table fib { key { ip.dst: lpm; } value { port: bit<16>; } size = 1K; }
stage s1 { lookup fib { hit(r) { forward(r.port); } miss { drop(no_route); } } }"""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 32)), min_size=1, max_size=12,
                unique_by=lambda x: (x[0] >> (32 - x[1]) if x[1] else 0, x[1])),
       st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=10))
def test_lpm_matches_an_independent_reference(tmp_path, prefixes, addrs):
    it = interp(tmp_path, FIB)
    nets = []
    for i, (addr, plen) in enumerate(prefixes):
        net = ipaddress.ip_network((addr, plen), strict=False)
        it.tables["fib"].insert(Entry((Match(int(net.network_address), plen),), {"port": i}))
        nets.append((net, i))
    for a in addrs:
        dst = ipaddress.ip_address(a)
        matching = [(n.prefixlen, port) for n, port in nets if dst in n]
        out = it.process(ip_pkt(dst=str(dst)), 1)
        if matching:
            assert (out.kind, out.port) == ("forward", max(matching)[1])
        else:
            assert (out.kind, out.reason) == ("drop", "no_route")


def test_exact_ternary_priority_and_range(tmp_path):
    body = """table t { key { ip.src: ternary; udp.dport: range; } value { port: bit<16>; } size = 16; }
    stage s1 { lookup t { hit(r) { forward(r.port); } miss { drop(nomatch); } } }"""
    it = interp(tmp_path, body)
    tbl = it.tables["t"]
    tbl.insert(Entry((Match(0x0A000000, 0xFF000000), Match(1000, 3000)), {"port": 1}, priority=10))
    tbl.insert(Entry((Match(0x0A000001, 0xFFFFFFFF), Match(0, 65535)), {"port": 2}, priority=20))
    tbl.insert(Entry((Match(0, 0), Match(2000, 2000)), {"port": 3}, priority=5))
    assert it.process(ip_pkt(src="10.0.0.1"), 0).port == 2  # both 1 and 2 match: priority 20 wins
    assert it.process(ip_pkt(src="10.9.9.9"), 0).port == 1  # 10/8 and dport 2000 in 1000..3000
    assert it.process(ip_pkt(src="11.0.0.1"), 0).port == 3  # only the wildcard with dport == 2000
    out = it.process(bytes(Ether() / IP(src="11.0.0.1") / UDP(dport=5000)), 0)
    assert (out.kind, out.reason) == ("drop", "nomatch")


def test_bad_entries_are_rejected_and_change_nothing(tmp_path):
    it = interp(tmp_path, FIB)
    tbl = it.tables["fib"]
    tbl.insert(Entry((Match(0x0A000000, 8),), {"port": 1}))
    for bad in (Entry((Match(1, 40),), {"port": 1}), Entry((Match(2**32, 8),), {"port": 1}),
                Entry((Match(1, 8),), {"port": 2**16}), Entry((Match(1, 8),), {"nope": 1}),
                Entry((Match(0x0A000000, 8),), {"port": 5})):
        with pytest.raises(TableError):
            tbl.insert(bad)
    assert len(tbl.entries) == 1 and it.process(ip_pkt(dst="10.1.1.1"), 0).port == 1


# ---- arithmetic and control flow ---------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 9))
def test_bit8_arithmetic_wraps_like_python_mod_256(tmp_path, a, b, sh):
    body = "stage s1 { meta.a = ip.ttl; meta.b = ip.dscp ++ ip.ecn; }"
    body += f"""
    stage s2 {{
      let add: bit<8> = meta.a + meta.b;
      let sub: bit<8> = meta.a - meta.b;
      let mix: bit<8> = (meta.a & meta.b) | (meta.a ^ ~meta.b);
      let shl: bit<8> = meta.a << {sh};
      let shr: bit<8> = meta.a >> {sh};
      ip.ttl = add;
      meta.w = add ++ sub ++ mix ++ shl;
      if (meta.a < meta.b) {{ forward(1); }} else {{ if (meta.a == meta.b) {{ forward(2); }} else {{ forward(3); }} }}
      ip.identification = meta.w[31:16];
      udp.sport = meta.w[15:0];
      udp.dport = bit<16>(shr);
    }}"""
    it = interp(tmp_path, body, "s1, s2")
    out = it.process(bytes(Ether() / IP(ttl=a, tos=b) / UDP() / b"x"), 0)
    add, sub, mix = (a + b) % 256, (a - b) % 256, ((a & b) | (a ^ (~b & 255))) % 256
    shl, shr = (a << sh) % 256 if sh < 8 else 0, a >> sh if sh < 8 else 0
    got = Ether(out.data)
    assert out.port == (1 if a < b else 2 if a == b else 3)
    assert got[IP].ttl == add
    assert got[IP].id == (add << 8) | sub and got[UDP].sport == (mix << 8) | shl and got[UDP].dport == shr


def test_hashes_match_zlib_and_crc16_arc(tmp_path):
    it = interp(tmp_path,
                "stage s1 { udp.sport = crc32(ip.src, ip.dst)[15:0]; udp.dport = crc16(ip.src); forward(0); }")
    got = Ether(it.process(ip_pkt(src="10.0.0.1", dst="10.0.0.2"), 0).data)
    assert got[UDP].sport == zlib.crc32(bytes([10, 0, 0, 1, 10, 0, 0, 2])) & 0xFFFF

    assert crc16_arc(b"123456789") == 0xBB3D
    assert got[UDP].dport == crc16_arc(bytes([10, 0, 0, 1]))


def test_drop_punt_verify_and_their_counters(tmp_path):
    body = """stage s1 {
      verify(ip.ttl > 1, ttl_expired);
      if (udp.dport == 53) { punt(dns_to_cpu); }
      if (udp.dport == 9) { drop(discard); }
      forward(1);
    }"""
    it = interp(tmp_path, body)
    assert it.process(ip_pkt(ttl=1), 0).reason == "ttl_expired"
    p = it.process(bytes(Ether() / IP() / UDP(dport=53)), 0)
    assert p.kind == "punt" and p.reason == "dns_to_cpu" and UDP in Ether(p.data)
    assert it.process(bytes(Ether() / IP() / UDP(dport=9)), 0).reason == "discard"
    assert it.process(bytes(Ether() / IP() / UDP(dport=9)), 0).reason == "discard"
    assert it.state.drops == {"ttl_expired": 1, "discard": 2} and it.state.punts == {"dns_to_cpu": 1}
    assert it.process(bytes(Ether() / IP(ttl=5) / UDP(dport=7)), 0).kind == "forward"


def test_no_egress_drops(tmp_path):
    it = interp(tmp_path, "stage s1 { meta.a = 1; }")
    assert it.process(ip_pkt(), 0).reason == "no_egress"



@pytest.mark.parametrize(("port", "kind"), [(0, "forward"), (15, "forward"), (16, "drop"), (32, "drop"),
                                            (600, "drop"), (600 - 512, "drop"), (65535, "drop")])
def test_forward_to_a_port_no_pipeline_takes_drops_no_such_port(tmp_path, port, kind):
    """Ports 0..15 are the program's; any other number (a server port, 600 which a 9-bit switch
    port would truncate to 88) is no port of the network function: dropped, counted."""
    it = interp(tmp_path, f"stage s1 {{ meta.port = {port}; forward(meta.port); }}")
    out = it.process(ip_pkt(), 0)
    assert out.kind == kind and (out.port == port if kind == "forward" else out.reason == "no_such_port")


def test_forward_of_the_ingress_port_is_not_guarded(tmp_path):
    it = interp(tmp_path, "stage s1 { forward(std.ingress_port); }")
    assert [it.process(ip_pkt(), p).port for p in (0, 5, 15)] == [0, 5, 15]
    assert not any(isinstance(s, ir.If) for s in it.program.stages["s1"].body)

# ---- counters, meters, registers ---------------------------------------------------------

def test_counters_count_packets_and_bytes(tmp_path):
    it = interp(tmp_path, "counter c[16];\nstage s1 { c.count(bit<32>(udp.dport[3:0])); forward(1); }")
    for dport in (1, 1, 2, 17):
        it.process(bytes(Ether() / IP() / UDP(dport=dport) / b"abc"), 0)
    size = len(Ether() / IP() / UDP() / b"abc")
    assert it.state.counters["c"] == {1: (3, 3 * size), 2: (1, size)}  # 17 & 15 == 1


def test_trtcm_meter_colours_follow_rfc_2698(tmp_path):
    it = interp(tmp_path, "meter m[4];\nstage s1 { meta.a = bit<8>(m.execute(1)); forward(bit<16>(meta.a)); }")
    pkt = bytes(Ether() / IP() / UDP() / (b"x" * 58))  # 100 bytes
    # CIR 1000 B/s, CBS 250 B; PIR 2000 B/s, PBS 400 B; colour-blind, buckets start full
    it.state.meter_config["m"] = {1: MeterConfig(cir=1000, cbs=250, pir=2000, pbs=400)}
    colours = [it.process(pkt, 0, now=0.0).port for _ in range(5)]
    # Tc: 250 -> 150 -> 50 -> (yellow) ; Tp: 400 -> 300 -> 200 -> 100 -> 0 -> (red)
    assert colours == [0, 0, 1, 1, 2]
    # after 0.1 s: Tp += 200 (=200), Tc += 100 (=150): green again
    assert it.process(pkt, 0, now=0.1).port == 0


def test_registers_keep_state_between_packets(tmp_path):
    body = "register r: bit<8>[4];\nstage s1 { r[2] = r[2] + 1; forward(bit<16>(r[2])); }"
    it = interp(tmp_path, body)
    assert [it.process(ip_pkt(), 0).port for _ in range(3)] == [1, 2, 3]
    assert it.state.registers["r"] == {2: 3}


# ---- data-plane state, timeouts, port allocation -----------------------------------------

NAT = """state flows { key { ip.src: exact; udp.sport: exact; } value { ext: bit<16>; } size = 2; timeout = 10s; }
stage s1 {
  lookup flows {
    hit(f) { udp.sport = f.ext; }
    miss { meta.port = alloc_port(ip.dst); if (meta.port == 0) { drop(exhausted); }
           insert flows { ext = meta.port; }  udp.sport = meta.port; }
  }
  forward(1);
}"""


def test_state_insert_lookup_timeout_and_refresh(tmp_path):
    it = interp(tmp_path, NAT)
    sport = lambda out: Ether(out.data)[UDP].sport  # noqa: E731
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=0)) == 1024  # lowest free port
    assert sport(it.process(ip_pkt(src="10.0.0.2"), 0, now=1)) == 1025
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=9)) == 1024  # hit at 9 s: refreshed to 19 s
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=18.5)) == 1024
    # 10.0.0.2 expired at 11 s; the table (size 2) has room again, a new port is allocated
    assert sport(it.process(ip_pkt(src="10.0.0.2"), 0, now=12)) == 1026
    assert sport(it.process(ip_pkt(src="10.0.0.3"), 0, now=12)) == 1027  # full table: insert fails...
    assert sport(it.process(ip_pkt(src="10.0.0.3"), 0, now=13)) == 1028  # ...so it is not remembered


def test_state_without_refresh_expires_despite_hits(tmp_path):
    it = interp(tmp_path, NAT.replace("timeout = 10s;", "timeout = 10s; refresh = false;"))
    sport = lambda out: Ether(out.data)[UDP].sport  # noqa: E731
    assert sport(it.process(ip_pkt(), 0, now=0)) == 1024
    assert sport(it.process(ip_pkt(), 0, now=9)) == 1024
    assert sport(it.process(ip_pkt(), 0, now=10.5)) == 1025


# Two tables per mapping, as examples/cgnat.nfp: `out` by (source, sport) and `back` by
# (address, port); `back` holds the port and is refreshed only by `out`'s hits.
HELD = """state out { key { ip.src: exact; udp.sport: exact; } value { ext: bit<16>; } size = 8; timeout = 10s; }
state back { key { ip.dst: exact as addr; meta.port: exact as port; } value { who: bit<32>; } size = 8;
             timeout = 10s; refresh = false; holds_ports = [addr, port]; }
stage s1 {
  lookup out {
    hit(m) { meta.port = m.ext; refresh back; }
    miss { meta.port = alloc_port(ip.dst); if (meta.port == 0) { drop(exhausted); }
           insert out { ext = meta.port; }  insert back { who = ip.src; } }
  }
  if (udp.dport == 7) { remove back; }
  udp.sport = meta.port;
  forward(1);
}"""


def test_refresh_restarts_another_tables_timer_and_a_held_port_is_freed_when_it_expires(tmp_path):
    it = interp(tmp_path, HELD)
    sport = lambda out: Ether(out.data)[UDP].sport  # noqa: E731
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=0)) == 1024
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=8)) == 1024  # out's hit: back refreshed to 18 s
    assert sport(it.process(ip_pkt(src="10.0.0.3"), 0, now=12)) == 1025  # 1024 still held by back
    assert it.state.state_lookup("back", (0x0A000002, 1024), 17, refresh=False) == {"who": 0x0A000001}
    # out expired at 18 s with back: 1024 is free again, the lowest
    assert sport(it.process(ip_pkt(src="10.0.0.4"), 0, now=18)) == 1024


def test_refresh_of_a_missing_entry_does_nothing_and_remove_frees_the_port(tmp_path):
    it = interp(tmp_path, HELD)
    sport = lambda out: Ether(out.data)[UDP].sport  # noqa: E731
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=0)) == 1024
    it.state.state_remove("back", (0x0A000002, 1024), 1)  # the mapping's inbound half, gone
    assert sport(it.process(ip_pkt(src="10.0.0.1"), 0, now=2)) == 1024  # out hits; refresh finds nothing
    assert "back" in it.state.state_tables and not it.state.state_tables["back"]
    assert sport(it.process(ip_pkt(src="10.0.0.5"), 0, now=3)) == 1024  # the removal gave 1024 back
    removed = bytes(Ether() / IP(src="10.0.0.6", dst="10.0.0.2") / UDP(sport=1000, dport=7))
    assert sport(it.process(removed, 0, now=4)) == 1025  # inserted, then removed
    assert sport(it.process(ip_pkt(src="10.0.0.7"), 0, now=5)) == 1025


# ---- anti-replay (RFC 4303 Appendix A) ---------------------------------------------------

def replay_it(tmp_path: Path) -> Interpreter:
    body = ("stage s1 { meta.w = bit<32>(udp.sport);"
            " if (replay_check(7, meta.w)) { forward(1); } else { drop(replayed); } }")
    return interp(tmp_path, body)


def seq(it: Interpreter, n: int) -> bool:
    return it.process(bytes(Ether() / IP() / UDP(sport=n)), 0).kind == "forward"


def test_replay_window_vpp_sequence(tmp_path):
    it = replay_it(tmp_path)
    assert all(seq(it, n) for n in range(1, 34))
    assert not any(seq(it, n) for n in range(1, 34))  # every replay of 1..33 rejected
    assert [seq(it, 35) for _ in range(8)] == [True] + [False] * 7
    assert seq(it, 257)
    assert seq(it, 200) and seq(it, 234)  # inside the window (257 - 64 < n), never seen
    assert not seq(it, 193) and not seq(it, 200)  # left of the window / duplicate


@pytest.mark.parametrize("bit", range(64))
def test_replay_duplicate_at_every_bit_position(tmp_path, bit):
    """DPDK's rte_ipsec accepts duplicates at positions 32..63; the reference must not."""
    it = replay_it(tmp_path)
    top = 1000
    assert seq(it, top - bit)
    if bit:
        assert seq(it, top)
    assert not seq(it, top - bit), bit


# ---- ESP against scapy --------------------------------------------------------------------

KEY, SALT = bytes(range(16)), bytes([0xCA, 0xFE, 0xBA, 0xBE])
ESP_PROG = f"""
table sa {{ key {{ std.ingress_port: exact; }} value {{ spi: bit<32>; seq: bit<32>; }} size = 4; }}
stage s1 {{
  lookup sa {{ hit(a) {{
    esp_encrypt(outer, esp, a.spi, a.seq, 0x{KEY.hex()}, 0x{SALT.hex()}, 192.0.2.1, 198.51.100.1);
    forward(2); }} }}
}}
"""


def scapy_sa() -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=0x1001, crypt_algo="AES-GCM", crypt_key=KEY + SALT,
                               tunnel_header=IP(src="192.0.2.1", dst="198.51.100.1"))


def test_esp_encrypt_decrypts_with_scapy(tmp_path):
    it = interp(tmp_path, ESP_PROG)
    it.tables["sa"].insert(Entry((Match(1),), {"spi": 0x1001, "seq": 5}))
    inner = IP(src="10.1.1.1", dst="10.2.2.2") / UDP(sport=5, dport=6) / b"secret payload"
    out = it.process(bytes(Ether(src="00:00:00:00:00:01") / inner), 1)
    got = Ether(out.data)
    assert got[IP].proto == 50 and got[IP].src == "192.0.2.1" and got[ESP].spi == 0x1001 and got[ESP].seq == 5
    assert got[IP].len == len(out.data) - 14
    plain = scapy_sa().decrypt(got[IP].copy())
    assert bytes(plain) == bytes(inner)


def test_scapy_esp_decrypts_in_the_interpreter_and_bad_icv_is_rejected(tmp_path):
    body = f"""table sa {{ key {{ esp.spi: exact; }} value {{ k: bit<128>; }} size = 4; }}
    stage s1 {{ lookup sa {{ hit(a) {{
      if (esp_decrypt(outer, esp, a.k, 0x{SALT.hex()})) {{ forward(3); }} else {{ drop(bad_icv); }} }}
      miss {{ drop(unknown_spi); }} }} }}"""
    path = tmp_path / "d.nfp"
    old_start = "state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: accept; } }"
    text = HEAD.replace(old_start, "state start { extract eth; extract outer; extract esp; transition accept; }")
    path.write_text(text + body + "\npipeline main { ports = [0..7]; parser = p; stages = [s1]; }\n")
    it = Interpreter(compile_ir(str(path)))
    it.tables["sa"].insert(Entry((Match(0x1001),), {"k": int.from_bytes(KEY, "big")}))
    inner = IP(src="10.1.1.1", dst="10.2.2.2") / UDP(sport=5, dport=6) / b"from scapy"
    sa = scapy_sa()
    sa.seq_num = 9
    enc = sa.encrypt(inner)
    out = it.process(bytes(Ether() / enc), 0)
    assert out.kind == "forward" and out.data[14:] == bytes(inner)
    tampered = bytearray(bytes(Ether() / enc))
    tampered[-1] ^= 1
    assert it.process(bytes(tampered), 0).reason == "bad_icv"
