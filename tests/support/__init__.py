"""The tests' shared helpers (fixtures are in ``tests/conftest.py``, which takes them from
here): the front end on source text, ``nfc`` in-process, example builds made once and shared
read-only (``build_example``), server programs made once by content (``run_make``), ``nfc run``
on pcaps, the reference interpreter's outputs, a switch model behind P4Runtime.  No test
module imports another test module: what two need lives here."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

# the generated server program builds against Debian's DPDK (libdpdk-dev) with make
HAVE_DPDK = shutil.which("make") is not None and shutil.which("pkg-config") is not None and subprocess.run(
    ["pkg-config", "--exists", "libdpdk"]).returncode == 0

from compiler.content_cache import cache_root, compiler_fingerprint, content_key, locked  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from lang.symbols import CheckedProgram  # noqa: E402
from runtime.made import is_made, make_program  # noqa: E402


class Front:
    """Compile source text from a temporary file; keep diagnostics and their rendering."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def load(self, text: str, name: str = "t.nfp") -> tuple[CheckedProgram, Diagnostics, SourceMap]:
        path = self.tmp / name
        path.write_text(text)
        diags, sources = Diagnostics(), SourceMap()
        prog = load(str(path), diags, sources)
        return prog, diags, sources


def compile_ir(path: str) -> Any:
    """Front end + lowering of a file, failing the test on any diagnostic."""
    from compiler.lower import lower

    diags, sources = Diagnostics(), SourceMap()
    checked = load(path, diags, sources)
    assert not diags.has_errors, "\n".join(sources.render(d) for d in diags.items)
    return lower(checked)


def reference_outputs(spec: Any, inputs: dict[int, list[bytes]]) -> tuple[dict[int, Counter[bytes]], Counter[str]]:
    """What the reference interpreter ``spec`` does with the packets of each input port, in the
    shape ``nfc_run`` returns: packets per egress port (multisets) and drops by reason."""
    out: dict[int, Counter[bytes]] = {}
    drops: Counter[str] = Counter()
    for port, pkts in inputs.items():
        for data in pkts:
            o = spec.process(data, port)
            if o.kind == "forward":
                out.setdefault(o.port or 0, Counter())[o.data] += 1
            else:
                drops[o.reason or o.kind] += 1
    return out, drops


def nfc_run(out: Path, entries: dict[str, Any], inputs: dict[int, list[bytes]], work: Path
            ) -> tuple[dict[int, Counter[bytes]], Counter[str]]:
    """``nfc run OUT`` with ``entries`` (the --entries JSON) and one pcap per input port:
    the packets captured per egress port (multisets) and the drops by reason."""
    from scapy.utils import RawPcapReader, RawPcapWriter

    work.mkdir(parents=True, exist_ok=True)
    (work / "entries.json").write_text(json.dumps(entries))
    args = []
    for port, pkts in inputs.items():
        with RawPcapWriter(str(work / f"in{port}.pcap"), linktype=1) as w:
            for p in pkts:
                w.write(p)
        args += ["--inject", f"{port}={work / f'in{port}.pcap'}"]
    r = nfc_cli("run", str(out), "--entries", str(work / "entries.json"), *args, "--capture", str(work / "cap"))
    assert r.returncode == 0, r.stderr[-3000:]
    counters = json.loads((work / "cap/counters.json").read_text())
    got = {int(p.stem.split("-")[1]): Counter(bytes(d) for d, _ in RawPcapReader(str(p)))
           for p in (work / "cap").glob("port-*.pcap")}
    drops: Counter[str] = Counter()
    for k, v in counters["drops"].items():
        drops[k.split(":", 1)[1]] += v
    return {p: n for p, n in got.items() if n}, drops


def sanitized_harness(source: Path, runtime: list[str], out: Path) -> Path:
    """A C test driver (tests/c/) linked with the server runtime's ``runtime`` sources, under
    ASan + UBSan, as ``out``."""
    run = ROOT / "targets" / "dpdk" / "runtime"
    flags = [subprocess.run(["pkg-config", what, "libdpdk"], capture_output=True, text=True, check=True).stdout.split()
             for what in ("--cflags", "--libs")]
    cmd = ["gcc", *flags[0], "-march=native", "-O1", "-g", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=undefined", "-Wall", "-Wextra", "-Werror", "-std=gnu11", f"-I{run}",
           "-o", str(out), str(source), *(str(run / r) for r in runtime), *flags[1]]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


TABLES_RUNTIME = ["nfc_state.c", "nfc_tables.c", "nfc_values.c", "nfc_lpm.c", "nfc_acl.c"]  # what nfc_tables.c needs


def run_harness(harness: Path, lcores: str = "0", *args: str) -> subprocess.CompletedProcess[str]:
    """A sanitized harness (``sanitized_harness``) run on ``lcores`` with DPDK in 256 MB of
    ordinary memory and no devices; ``args`` after ``--``; a leak is no failure, any other
    report is."""
    return subprocess.run([str(harness), "--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry",
                           "--log-level=error", "-l", lcores, *(("--", *args) if args else ())],
                          capture_output=True, text=True, timeout=120,
                          env={"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "PATH": "/usr/bin:/bin"})


def write(tmp_path: Path, text: str) -> str:
    """``text`` as ``tmp_path/t.nfp``; its path."""
    p = tmp_path / "t.nfp"
    p.write_text(text)
    return str(p)


def compile_file(path: str, target: str = "tofino+dpdk", allow_overcommit: bool = False) -> Any:
    """Every pass of ``nfc build`` on a file (raises CompileError on a diagnostic); the placement
    from the content cache, as ``nfc build`` takes it (solved once for the suite)."""
    from compiler.pipeline import compile_program

    diags = Diagnostics()
    return compile_program(load(path, diags, SourceMap()), target, diags, allow_overcommit=allow_overcommit,
                           cache=cache_root())


def run_split(switch: Any, server: Any, data: bytes, port: int) -> Any:
    """A packet through the split reference: the switch part, and the server part for as long
    as the switch sends it to a server port (``SwitchReference``, ``ServerReference``)."""
    out = switch.process(data, port)
    for _ in range(4):
        if out.kind != "forward" or out.port not in switch.server_ports:
            return out
        back = server.process(out.data)
        if back.kind != "forward":
            return back
        out = switch.process(back.data, switch.server_ports[0])
    raise AssertionError("the packet kept bouncing between switch and server")


GW_IP, GW_MAC, NH_MAC = "10.255.0.1", "02:00:0a:ff:00:01", "02:00:00:00:00:99"
# an entries file (`nfc run --entries`) for examples/vpn_gateway.nfp: customer 5's overlay 42 routes VM
# 192.168.42.17 to host 172.16.5.17 (VNI 5042), the underlay sends 172.16/16 out of port 21, and VNI
# 3007 comes back to the customer as S-tag 3, C-tag 7 on port 4
VPN_ENTRIES = {"overlay_routes": [{"match": {"meta_customer": 5, "meta_overlay": 42, "vm_ip": "192.168.42.17"},
                                   "values": {"host_ip": "172.16.5.17", "vni": 5042}}],
               "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                                    "values": {"port": 21, "next_hop_mac": NH_MAC}}],
               "vni_to_qinq": [{"match": {"vxlan_vni": 3007}, "values": {"s_tag": 3, "c_tag": 7, "port": 4}}]}


def expected_vxlan(customer: Any, host_ip: str, vni: int) -> bytes:
    """The VPN gateway's customer->cloud output, by seed 000 §3 and RFC 7348, built with scapy:
    the QinQ tags removed, the frame in VXLAN toward the VM's host, UDP source port from the
    inner flow hash (CRC-16 of the addresses and protocol)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN

    from tests.oracles import crc16_arc

    ip = customer[IP]
    sport = 0xC000 | (crc16_arc(bytes(ip)[12:20] + bytes([ip.proto])) & 0x3FFF)
    frame = Ether(src=customer[Ether].src, dst=customer[Ether].dst, type=0x0800) / ip
    return bytes(Ether(src=GW_MAC, dst=NH_MAC) / IP(src=GW_IP, dst=host_ip, ttl=64, id=0, flags=0)
                 / UDP(sport=sport, dport=4789, chksum=0) / VXLAN(vni=vni, flags=0x08) / frame)


# ---- random inputs for the differential tests and the packet fuzzer (tests/fuzz.py) -------------


def nfc_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``nfc ARGS`` run from ``cwd`` (the project root), in this process (``nfc.cli.main``):
    its exit status and what it printed.  The signal handlers ``nfc run`` sets are put back
    after it.  ``nfc_subprocess`` runs the installed command as a user does."""
    from nfc.cli import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:  # argparse: --help, a usage error
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["nfc", *args], rc, out.getvalue(), err.getvalue())


def nfc_subprocess(*args: str, cwd: Path = ROOT, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``nfc ARGS`` as its own process (``python -m nfc.cli``), for the tests of the command as
    a user runs it (start-up, exit status, a process's output)."""
    return subprocess.run([sys.executable, "-m", "nfc.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


# The head of a small test program: Ethernet + IPv4 parsed, one pipeline of stage `work` on ports 0-15.
L3_HEAD = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
parser l3 {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); } }
  state ip { extract ipv4; transition accept; }
}
ports all = [0..15];
pipeline forward { ports = all; parser = l3; stages = [work]; traffic = 100%; }
"""


# A program with a table of each kind the server lays out (tests/test_server_memory.py), sized by
# write_sized: an exact table, a two-field exact one with 80-bit values, an LPM, a two-field
# ternary and a data-plane state table.
MEMORY_PROGRAM = L3_HEAD + """table hosts { key { ipv4.dst: exact; } value { port: bit<9>; } size = HOSTS; }
table pairs { key { ipv4.src: exact; ipv4.dst: exact; } value { mac: bit<48>; tag: bit<32>; } size = PAIRS; }
table routes { key { ipv4.dst: lpm; } value { port: bit<9>; } size = ROUTES; }
table acl { key { ipv4.src: ternary; ipv4.dst: ternary; } value { port: bit<9>; } size = ACL; }
state flows { key { ipv4.src: exact; } value { n: bit<8>; } size = FLOWS; timeout = 1s; }
stage work {
  lookup flows { hit(f) { } miss { insert flows { n = 1; } } }
  lookup pairs { hit(w) { eth.dst = w.mac; } miss { } }
  lookup acl { hit(a) { forward(a.port); } miss { } }
  lookup routes { hit(r) { forward(r.port); } miss { } }
  lookup hosts { hit(h) { forward(h.port); } miss { drop(no_route); } }
}
"""
MEMORY_SIZES = {"HOSTS": 5000, "PAIRS": 3000, "ROUTES": 2000, "ACL": 4000, "FLOWS": 100_000}


def write_sized(tmp: Path, name: str, sizes: dict[str, int]) -> Path:
    """MEMORY_PROGRAM with its tables at ``sizes``, written to tmp/NAME.nfp."""
    src = MEMORY_PROGRAM
    for k, v in sizes.items():
        src = src.replace(k, str(v))
    (tmp / f"{name}.nfp").write_text(src)
    return tmp / f"{name}.nfp"


def run_make(folder: Path, target: str = "nf") -> subprocess.CompletedProcess[str]:
    """``make -C FOLDER TARGET`` (-j2) of a generated server program, through the cache of
    programs by content (runtime/made.py) that ``nfc run`` uses: the suite builds the same
    programs many times, and every run after the first finds them made."""
    return make_program(folder, target, cache_root())


def build_with_server(source: str, out: Path, *extra: str) -> Path:
    """``nfc build SOURCE -o OUT --no-verify EXTRA...`` and ``make`` of its server program; its
    folder.  A source of the project's own (an example, a corpus program) is built once and
    shared read-only instead (``build_example``), and OUT is not used."""
    path = Path(source) if Path(source).is_absolute() else ROOT / source
    if path.resolve().is_relative_to(ROOT) and not path.resolve().is_relative_to(ROOT / "build"):
        flags = list(extra)
        target = "tofino+dpdk"
        if "--target" in flags:
            i = flags.index("--target")
            target = flags[i + 1]
            del flags[i:i + 2]
        return build_example(str(path.resolve().relative_to(ROOT)), target, "--no-verify", *flags, server=True)
    r = nfc_cli("build", source, "-o", str(out), "--no-verify", *extra)
    assert r.returncode == 0, r.stderr
    m = run_make(out / "server")
    assert m.returncode == 0, m.stderr[-3000:]
    return out


class P4RuntimeSwitch:
    """A build's switch model behind its P4Runtime server on loopback, and a primary client."""

    def __init__(self, out: Path, arch: str = "tna") -> None:
        from emulator.switchmodel.server import P4RuntimeServer, serve
        from nfc._build_dir import open_build
        from runtime.p4runtime import SwitchClient

        plan, _placed, self.model = open_build(out, arch)
        self.names = json.loads(plan.path(out, "name_map").read_text())
        self.p4rt = P4RuntimeServer(self.model, self.names, arch)
        self.grpc, port = serve(self.p4rt)
        self.client = SwitchClient(f"127.0.0.1:{port}", self.names, arch)

    def close(self) -> None:
        self.client.close()
        self.grpc.stop(0)


def entry_json(c: Any, table: str, e: Any) -> dict[str, object]:
    """Reference-interpreter entry ``e`` of ``table`` as an entry of the ``--entries`` file."""
    t = c.program.tables[table]
    match: dict[str, object] = {}
    for k, m in zip(t.keys, e.key, strict=True):
        if k.match == "lpm":
            match[k.name] = f"{m.value}/{k.expr.width if m.arg is None else m.arg}"
        elif k.match == "ternary":
            match[k.name] = [m.value, (1 << k.expr.width) - 1 if m.arg is None else m.arg]
        elif k.match == "range":
            match[k.name] = f"{m.value}..{m.value if m.arg is None else m.arg}"
        else:
            match[k.name] = m.value
    return {"match": match, "values": dict(e.values), "priority": e.priority}


def loaded_spec(c: Any, tables: dict[str, list[Any]]) -> Any:
    """The reference interpreter of compiled program ``c`` holding ``tables``' entries."""
    from compiler.interp import Interpreter

    spec = Interpreter(c.program)
    for name, rows in tables.items():
        for e in rows:
            spec.tables[name].insert(e)
    return spec


def learn_entries(c: Any, fz: Any, tables: dict[str, list[Any]], inputs: dict[int, list[bytes]]) -> None:
    """Add entries for half the keys the spec looked up and missed, so packets get past the
    wide exact tables (the servers' big tables) too, not only through their miss paths."""
    spec = loaded_spec(c, tables)
    missed: dict[str, set[tuple[int, ...]]] = {name: set() for name in tables}
    for name in tables:
        contents = spec.tables[name]

        def record(values: Any, lookup: Any = contents.lookup, name: str = name) -> Any:
            e = lookup(values)
            if e is None:
                missed[name].add(tuple(values))
            return e
        contents.lookup = record
    for port, pkts in inputs.items():
        for data in pkts:
            spec.process(data, port)
    for name, keys in missed.items():
        chosen = [k for k in sorted(keys) if fz.rnd.random() < 0.5]
        tables[name] += fz.entries_at(c.program.tables[name], chosen)


HAVE_REDIS = shutil.which("redis-server") is not None
needs_redis = pytest.mark.skipif(not HAVE_REDIS, reason="redis-server missing: python3 build.py setup installs "
                                 "it (Debian redis-server)")


# ---- builds made once and shared read-only ------------------------------------------------------

_HANDED: dict[Path, dict[str, tuple[int, int]]] = {}  # shared build -> its files' (size, mtime) when handed out


def _builds_root() -> Path:
    """Where shared builds live: the content cache (persistent), or this session's folder when
    caching is off (``NFC_CACHE_DIR=off``)."""
    root = cache_root()
    if root is None:
        root = Path(os.environ.get("PYTEST_NFC_SESSION_TMP") or tempfile.gettempdir()) / f"nfc-builds-{os.getppid()}"
    return root / "test-builds"


def build_example(source: str, target: str = "tofino+dpdk", *flags: str, server: bool = False) -> Path:
    """The build folder of ``nfc build SOURCE --target TARGET FLAGS...`` (SOURCE: an example's
    name, or a path from the project root), with its server program made if ``server``:
    built once for the content of the source, the compiler and the flags (every pytest worker
    and every later run takes the same folder), and **read-only** — a test that changes a
    build copies it first (``copy_build``); the session ends with an error naming any shared
    build a test changed."""
    src = ROOT / (source if "/" in source else f"examples/{source}.nfp")
    rel = str(src.relative_to(ROOT))
    key = content_key(compiler_fingerprint(), rel, src.read_bytes(), target, *flags)
    root = _builds_root()
    out = root / key / "out"
    with locked(root, "lock", key):
        done = root / key / "done"
        if not done.exists():
            shutil.rmtree(root / key, ignore_errors=True)
            r = nfc_cli("build", rel, "--target", target, "-o", str(out), *flags)
            assert r.returncode == 0, f"nfc build {rel} --target {target} {' '.join(flags)}:\n{r.stderr[-3000:]}"
            done.write_text(r.stderr)
        if server and _program_missing(out / "server"):
            m = run_make(out / "server")
            assert m.returncode == 0, m.stderr[-3000:]
    _HANDED.setdefault(out, _files(out))
    return out


def _program_missing(folder: Path) -> bool:
    return not (folder / "nf").is_file()


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """The sources of a build folder, with their sizes and times.  What ``make`` makes from them
    (server programs, objects: through runtime/made.py, by content) may be added to a shared
    build; a source may not change."""
    return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts
            and not is_made(f) and not f.name.startswith(".")}


def copy_build(out: Path, dest: Path) -> Path:
    """A private copy of shared build ``out`` as ``dest``, for a test that changes it."""
    shutil.copytree(out, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def changed_shared_builds() -> list[str]:
    """Shared builds whose files differ from what was handed out (a test wrote into one)."""
    changed = []
    for out, files in _HANDED.items():
        now = _files(out)
        if out.exists() and now != files:
            diff = sorted(set(now.items()) ^ set(files.items()))
            changed.append(f"{out}: {', '.join(sorted({name for name, _ in diff})[:5])}")
    return changed


# ---- tiers: `build.py test --quick` leaves out the tests marked slow -------------------------------

DPDK_MISSING = "DPDK (libdpdk-dev) missing: python3 build.py setup installs it"
# a module whose tests start DPDK programs: `pytestmark = DPDK`
DPDK = [pytest.mark.slow, pytest.mark.skipif(not HAVE_DPDK, reason=DPDK_MISSING)]


def needs_dpdk(test: Any) -> Any:
    """A test that starts DPDK programs: slow (left out of ``build.py test --quick``), and
    skipped where DPDK is missing."""
    return pytest.mark.slow(pytest.mark.skipif(not HAVE_DPDK, reason=DPDK_MISSING)(test))
# a module whose tests run live (veth pairs in network namespaces): `pytestmark = LIVE`
LIVE = [pytest.mark.slow, pytest.mark.skipif(not HAVE_DPDK or os.geteuid() != 0 or not Path("/usr/sbin/ip").exists(),
                                             reason="needs DPDK, root and iproute2 (network namespaces, veth pairs)")]
