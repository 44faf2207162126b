"""Packet fuzzing of the generated server programs under ASan + UBSan (issue 17).

For every example whose server program builds (``--target tofino+dpdk``: the packets the
switch hands the server, behind a bridge header; ``--target dpdk``: raw packets on the NF's
logical ports, ``nf --tagged``), the program is built with AddressSanitizer and
UndefinedBehaviorSanitizer (``make nf-san``) and run on ``net_pcap`` with a batch of inputs:

* packets of ``tests/fuzz.py``'s ``Fuzzer`` (random walks of the parse graph) with its random
  table entries, plus entries for half the keys the spec missed (``learn_entries``); on a
  hybrid build the switch model turns them into what it sends the server;
* byte-level mutants of those packets: truncated at every header boundary (and one byte
  short of it), bits flipped, length fields (``*len*``, ``ihl``, offsets) set to boundary
  values, bridge headers with another cut id, a flipped validity bit, bytes inserted or
  removed behind them, raw garbage, jumbo payloads, and (dpdk alone) logical ports no
  pipeline takes.

The oracle: the program exits 0 with nothing on stderr matching ``ERROR: AddressSanitizer``
or ``runtime error:``, and its outputs per port (multisets) and drops by reason equal the
reference semantics' (``ServerReference`` behind a bridge, the interpreter alone).

``fuzz(...)`` runs a number of batches (CI runs one per build, ``tests/test_packet_fuzz.py``);
``main(minutes, seed, out_dir)`` loops seeds until time is up and minimises each new failure
(the batch bisected to the smallest failing subset, then the failing packets' bytes shrunk)
into ``out_dir``: ``in.pcap`` (frames as the program reads them), ``entries.json`` (the
``nfc run --entries`` format) and a README saying how to replay it:
``python -m tests.packet_fuzz --replay DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from scapy.utils import RawPcapReader, RawPcapWriter

from compiler import ir
from compiler.interp import Entry, Interpreter, Match, Stop
from compiler.interp.bits import mask, pack, unpack
from compiler.interp.bridge_codec import BridgeError, decode
from compiler.manifest import load_plan
from compiler.placed import Placed, load_placed
from compiler.placement import Bridge, Direction
from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server_ref import ServerReference
from runtime.control import ControlChannel
from runtime.entries import load_entries
from runtime.errors import RuntimeApiError
from runtime.server_proc import ServerProcess, eal_args
from tests.fuzz import Fuzzer
from tests.support import ROOT, entry_json, learn_entries, loaded_spec, nfc_cli, reference_outputs, run_make

__all__ = ["Batch", "Case", "NotBuilt", "Verdict", "build_case", "check", "ddmin", "fuzz", "main", "make_batch",
           "minimise", "replay", "same_failure", "sanitizer_excerpt", "sanitizer_options", "sanitizer_signature",
           "save", "tail", "write_pcap"]

TARGETS = ("tofino+dpdk", "dpdk")
PACKETS = 1500  # fuzzer packets per batch, before the switch and the mutants
SANITIZERS = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
SANITIZER_REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:")
TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame (NFC_TAG in nfc_main.c)
LENGTH_FIELD = re.compile(r"len|ihl|offset")
JUMBO = 9000  # bytes: longer frames are dropped as server_no_buffer by design (docs/server.md)
Outputs = tuple[dict[int, Counter[bytes]], Counter[str]]
T = TypeVar("T")


class NotBuilt(Exception):
    """The example has no server program for this target; the message is the build's first error."""


@dataclass(frozen=True)
class Case:
    """One build of one example: its folder, what it placed, and whether a switch is in front."""

    example: str
    target: str
    out: Path
    placed: Placed
    hybrid: bool

    @property
    def binary(self) -> Path:
        return self.out / "server" / "nf-san"

    @property
    def switch_port(self) -> int:
        """The switch port the server hangs off (hybrid builds); its outputs go there."""
        return self.placed.targets.server_ports[0]

    @property
    def label(self) -> str:
        return f"{self.example} --target {self.target}"


def examples() -> list[str]:
    return sorted(p.stem for p in (ROOT / "examples").glob("*.nfp"))


def source(example: str) -> str:
    """The program's source, relative to the repository: an example, else a test corpus program
    (one whose layout no example has)."""
    path = f"examples/{example}.nfp"
    return path if (ROOT / path).exists() else f"tests/corpus/{example}.nfp"


def build_case(example: str, target: str, folder: Path, sanitized: bool = True) -> Case:
    """``nfc build`` and (``sanitized``) ``make nf-san``; NotBuilt if the compiler refuses the combination."""
    out = folder / f"{example}.{target.replace('+', '-')}"
    r = nfc_cli("build", source(example), "--target", target, "--no-verify", "--allow-overcommit",
                "-o", str(out))
    if r.returncode != 0:
        raise NotBuilt(next((line for line in r.stderr.splitlines() if "error[" in line), r.stderr[-500:]))
    if sanitized:
        r = run_make(out / "server", "nf-san")
        if r.returncode != 0:
            raise RuntimeError(f"make nf-san for {example} --target {target} failed:\n{r.stderr[-3000:]}")
    plan = load_plan(out)
    return Case(example, target, out, load_placed(plan.path(out, "placed")), plan.switch is not None)


# ---- batches ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Table entries, and the server's input frames per logical ingress port in sending order
    (a hybrid build's all arrive from the switch port)."""

    tables: dict[str, list[Entry]]
    inputs: dict[int, list[bytes]]

    def packets(self) -> list[tuple[int, bytes]]:
        return [(port, data) for port, frames in self.inputs.items() for data in frames]

    def with_packets(self, packets: Sequence[tuple[int, bytes]]) -> Batch:
        inputs: dict[int, list[bytes]] = {}
        for port, data in packets:
            inputs.setdefault(port, []).append(data)
        return Batch(self.tables, inputs)

    def entries(self) -> list[tuple[str, Entry]]:
        return [(name, e) for name, rows in self.tables.items() for e in rows]

    def with_entries(self, entries: Sequence[tuple[str, Entry]]) -> Batch:
        tables: dict[str, list[Entry]] = {}
        for name, e in entries:
            tables.setdefault(name, []).append(e)
        return Batch(tables, self.inputs)

    def __len__(self) -> int:
        return sum(len(v) for v in self.inputs.values())


def make_batch(case: Case, seed: int, packets: int = PACKETS) -> tuple[Batch, Counter[str]]:
    """Entries and inputs from ``seed``; also how many frames of each kind (fuzzer, mutation) it
    holds.  A hybrid build's switch sends the server a fraction of the packets: more are made,
    ``packets`` at a time (up to four times as many), until a third of ``packets`` reach it."""
    prog = case.placed.program
    fz = Fuzzer(prog, seed)
    tables = {name: fz.entries(t, 16) for name, t in prog.tables.items() if not t.is_state}
    base: dict[int, list[bytes]] = {}
    for _ in range(4 if case.hybrid else 1):
        raw: dict[int, list[bytes]] = {}
        for _ in range(packets):
            pl = fz.rnd.choice(prog.pipelines)
            raw.setdefault(fz.port(pl), []).append(fz.packet(pl))
        learn_entries(case.placed, fz, tables, raw)
        for port, frames in (_through_switch(case, tables, raw) if case.hybrid else raw).items():
            base.setdefault(port, []).extend(frames)
        if sum(len(v) for v in base.values()) >= packets // 3:
            break
    inputs, kinds = Mutator(case, fz.rnd).batch(base)
    return Batch(tables, inputs), kinds


def _through_switch(case: Case, tables: dict[str, list[Entry]], raw: dict[int, list[bytes]]
                    ) -> dict[int, list[bytes]]:
    """What the switch model sends the server, holding the entries of the tables placed on the
    switch alone (a switch cache stays empty: every lookup in it misses to the server)."""
    switch = SwitchModel.from_build(case.out)
    for t in load_plan(case.out).tables:
        if not t.on_server and t.name in switch.tables:
            for e in tables.get(t.name, []):
                switch.tables[t.name].insert(e)
    to_server = []
    for port, frames in raw.items():
        for data in frames:
            o = switch.process(data, port)
            if o.kind == "forward" and o.port in switch.server_ports:
                to_server.append(o.data)
    return {case.switch_port: to_server}


# ---- mutations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a frame's headers are: a bridge header in front (or None), then (header, offset)s."""

    bridge: Bridge | None
    headers: tuple[tuple[ir.HeaderType, int], ...]

    @property
    def boundaries(self) -> list[int]:
        ends = [off + h.bits // 8 for h, off in self.headers]
        return sorted({*(off for _h, off in self.headers), *ends, *([self.bridge.bytes] if self.bridge else [])})

    @property
    def shape(self) -> tuple[object, ...]:
        return (self.bridge.cut_id if self.bridge else None, *(h.name for h, _off in self.headers))


class Mutator:
    """Byte-level mutants of the frames a server receives (see the module's docstring)."""

    KINDS = ("truncate", "flip", "length", "garbage", "jumbo")
    BRIDGE_KINDS = ("cut_id", "valid_bit", "bridge_shift")

    def __init__(self, case: Case, rnd: random.Random) -> None:
        self.case = case
        self.prog = case.placed.program
        self.rnd = rnd
        self.to_server = [b for b in case.placed.bridges if b.direction is Direction.TO_SERVER]
        self.cut_ids = sorted({b.cut_id for b in case.placed.bridges})
        self.kinds = self.KINDS + (self.BRIDGE_KINDS if case.hybrid else ("port",))

    def batch(self, base: dict[int, list[bytes]], per_frame: int = 2) -> tuple[dict[int, list[bytes]], Counter[str]]:
        """Each frame followed by ``per_frame`` mutants; the first frame of each header layout
        also by its truncations at every boundary."""
        out: dict[int, list[bytes]] = {}
        kinds: Counter[str] = Counter(fuzzer=sum(len(v) for v in base.values()))
        shapes: set[tuple[object, ...]] = set()
        for port, frames in base.items():
            for data in frames:
                out.setdefault(port, []).append(data)
                layout = self.layout(port, data)
                mutants = [(k, *self.mutant(k, port, data, layout)) for k in self.rnd.choices(self.kinds, k=per_frame)]
                if layout.shape not in shapes:
                    shapes.add(layout.shape)
                    mutants += [("truncate", port, data[:cut]) for cut in self.truncations(layout)]
                for kind, p, m in mutants:
                    out.setdefault(p, []).append(m)
                    kinds[kind] += 1
        return out, kinds

    def layout(self, port: int, data: bytes) -> Layout:
        if self.case.hybrid:
            return self._bridged(data)
        pl = next((p for p in self.prog.pipelines if p.has_port(port)), None)
        if pl is None:
            return Layout(None, ())
        spec = Interpreter(self.prog)
        ctx = spec.new_ctx(data, port, 0.0)
        with suppress(Stop):  # the headers extracted before a drop are there
            spec.parse(ctx, self.prog.parsers[pl.parser], data)
        return self._stacked(None, 0, [i.name for i in self.prog.instances if ctx.headers[i.name] is not None])

    def _bridged(self, data: bytes) -> Layout:
        b = next((x for x in self.to_server if data and x.cut_id == data[0]), None)
        if b is None:
            return Layout(None, ())
        try:
            valid, _values = decode(b, data)
        except BridgeError:
            return Layout(b, ())
        return self._stacked(b, b.bytes, [i for i in b.valid_bits if valid[i]])

    def _stacked(self, bridge: Bridge | None, start: int, instances: list[str]) -> Layout:
        headers = []
        for inst in instances:
            h = self.prog.header_of(inst)
            headers.append((h, start))
            start += h.bits // 8
        return Layout(bridge, tuple(headers))

    @staticmethod
    def truncations(layout: Layout) -> list[int]:
        """Lengths to cut a frame to: every header boundary, and one byte short of each."""
        return sorted({n for b in layout.boundaries for n in (b, b - 1) if n >= 0})

    def mutant(self, kind: str, port: int, data: bytes, layout: Layout) -> tuple[int, bytes]:
        rnd = self.rnd
        if kind == "truncate":
            return port, data[:rnd.choice(self.truncations(layout) or [0])]
        if kind == "flip":
            return port, self._flip(data, layout)
        if kind == "length":
            return port, self._length(data, layout)
        if kind == "garbage":
            lead = bytes([rnd.choice(self.cut_ids)]) if self.case.hybrid and rnd.random() < 0.5 else b""
            return port, lead + rnd.randbytes(rnd.randint(0, 80))
        if kind == "jumbo":  # over one 2 KiB mbuf, and room left under NFC_MAX_PKT (9216) for an encapsulation
            return port, data + rnd.randbytes(max(0, rnd.randint(1500, JUMBO) - len(data)))
        if kind == "port":
            return rnd.choice([0, rnd.randint(0, 600), (1 << 16) - 1, (1 << 32) - 1]), data
        return port, self._bridge(kind, data, layout)

    def _flip(self, data: bytes, layout: Layout) -> bytes:
        if not data:
            return data
        end = max(layout.boundaries, default=len(data))
        out = bytearray(data)
        for _ in range(self.rnd.randint(1, 4)):
            bit = self.rnd.randrange(8 * min(max(end, 1), len(out)))
            out[bit // 8] ^= 0x80 >> (bit % 8)
        return bytes(out)

    def _length(self, data: bytes, layout: Layout) -> bytes:
        fields = [(h, off, f) for h, off in layout.headers if off + h.bits // 8 <= len(data)
                  for f in h.fields if LENGTH_FIELD.search(f.name)]
        if not fields:
            return self._flip(data, layout)
        h, off, f = self.rnd.choice(fields)
        size = h.bits // 8
        values = unpack(h, data[off:off + size])
        old = values[f.name]
        values[f.name] = self.rnd.choice([0, 1, mask(f.width), old + 1, old - 1, self.rnd.getrandbits(f.width)]) \
            & mask(f.width)
        return data[:off] + pack(h, values) + data[off + size:]

    def _bridge(self, kind: str, data: bytes, layout: Layout) -> bytes:
        b = layout.bridge
        if b is None:  # not behind a bridge this program takes: a random cut id instead
            return bytes([self.rnd.choice(self.cut_ids)]) + data[1:]
        if kind == "cut_id":
            return bytes([self.rnd.choice([c for c in [*self.cut_ids, 0, 255] if c != b.cut_id])]) + data[1:]
        if kind == "valid_bit" and b.valid_bits:
            bit = 8 + self.rnd.randrange(len(b.valid_bits))  # after the cut id, one bit per header
            out = bytearray(data)
            out[bit // 8] ^= 0x80 >> (bit % 8)
            return bytes(out)
        k = self.rnd.randint(1, 3)
        if self.rnd.random() < 0.5:
            return data[:b.bytes] + self.rnd.randbytes(k) + data[b.bytes:]
        return data[:b.bytes] + data[b.bytes + k:]


# ---- the oracle ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """``signature``: empty if the program behaved; else what failed, the same for the same bug."""

    signature: str = ""
    detail: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.signature)


@dataclass(frozen=True)
class ServerRun:
    outputs: Outputs | None  # None: the program failed (``error`` says how)
    stderr: str
    error: str = ""


class _AtServer:
    """``ServerReference`` behind ``reference_outputs``' interface: its packets come from the switch."""

    def __init__(self, ref: ServerReference) -> None:
        self.ref = ref

    def process(self, data: bytes, port: int) -> Any:
        return self.ref.process(data)


def reference(case: Case, batch: Batch) -> Outputs:
    p = case.placed
    if not case.hybrid:
        return reference_outputs(loaded_spec(p, batch.tables), batch.inputs)
    ref = ServerReference(p.program, p.placement, p.bridges, case.switch_port)
    for name, e in batch.entries():
        ref.tables[name].insert(e)
    return reference_outputs(_AtServer(ref), batch.inputs)


def frames(case: Case, batch: Batch) -> list[bytes]:
    """The batch as the program reads it from its one net_pcap port."""
    if case.hybrid:
        return [data for _port, data in batch.packets()]
    return [TAG.pack(port) + data for port, data in batch.packets()]


def _record(t: ir.Table, e: Entry) -> list[int]:
    """A control-channel record (docs/control.md): the key fields, then an LPM key's prefix
    length, or a ternary / range table's prefix length, mask or high bound of each non-exact
    field and the priority; then the values."""
    def arg(k: ir.Key, m: Match) -> int:
        if m.arg is not None:
            return m.arg
        return k.expr.width if k.match == "lpm" else (1 << k.expr.width) - 1 if k.match == "ternary" else m.value

    pairs = list(zip(t.keys, e.key, strict=True))
    if t.match in ("ternary", "range"):
        args = [arg(k, m) for k, m in pairs if k.match != "exact"] + [e.priority]
    else:
        args = [arg(k, m) for k, m in pairs if k.match == "lpm"]
    return [m.value for m in e.key] + args + [e.values[v.name] for v in t.values]


def _load(ch: ControlChannel, case: Case, tables: dict[str, list[Entry]]) -> None:
    prog = case.placed.program
    for name, st in ch.tables.items():
        if not st.state and tables.get(name):
            ch.write("add", name, [_record(prog.tables[name], e) for e in tables[name]], chunk=1 << 20)


@contextmanager
def sanitizer_options() -> Iterator[None]:
    """ASan aborts at its first report, UBSan stops at its first (the program is built with
    -fno-sanitize-recover): a report means a non-zero exit, and stderr says what."""
    old = {k: os.environ.get(k) for k in SANITIZERS}
    os.environ.update(SANITIZERS)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_server(case: Case, batch: Batch, work: Path, timeout: float = 120.0) -> ServerRun:
    """nf-san with the batch's entries (over the control channel) on its frames."""
    work.mkdir(parents=True, exist_ok=True)
    rx, tx = work / "in.pcap", work / "out.pcap"
    tx.unlink(missing_ok=True)
    write_pcap(rx, frames(case, batch))
    try:
        with sanitizer_options():
            srv = ServerProcess(case.binary, eal=eal_args(), live=False, extra=[] if case.hybrid else ["--tagged"],
                                attach=[f"net_pcap0,rx_pcap={rx},tx_pcap={tx}"])
    except RuntimeApiError as e:
        return ServerRun(None, str(e), f"did not start: {str(e)[:200]}")
    with srv:
        try:
            _load(srv.control, case, batch.tables)
        except RuntimeApiError as e:
            srv.stop()
            return ServerRun(None, srv.stderr, f"entries refused: {str(e)[:200]}")
        try:
            srv.control.start()
            counters = srv.wait(timeout)
        except RuntimeApiError:  # wait() says so when the exit status is not 0 (a sanitizer aborted)
            srv.stop()
            return ServerRun(None, srv.stderr, f"exit {srv.proc.returncode}: did not end well")
    # a punt on a server alone is counted by its reason (COUNTERS' punts), as the reference reports it
    return ServerRun((_outputs(case, tx), Counter(counters.get("drops", {})) + Counter(counters.get("punts", {}))),
                     srv.stderr)


def _outputs(case: Case, tx: Path) -> dict[int, Counter[bytes]]:
    got: dict[int, Counter[bytes]] = {}
    for data, _meta in RawPcapReader(str(tx)) if tx.exists() else []:
        if case.hybrid:
            got.setdefault(case.switch_port, Counter())[bytes(data)] += 1
        else:
            got.setdefault(TAG.unpack_from(data)[0], Counter())[bytes(data[TAG.size:])] += 1
    return got


def judge(want: Outputs, run: ServerRun) -> Verdict:
    report = sanitizer_signature(run.stderr)
    if report:
        return Verdict(report, sanitizer_excerpt(run.stderr))
    if run.outputs is None:
        return Verdict(f"server {run.error.split(':')[0]}", run.error + "\n" + tail(run.stderr))
    if run.outputs != want:
        return Verdict(_mismatch(want, run.outputs), _difference(want, run.outputs))
    return Verdict()


def check(case: Case, batch: Batch, work: Path) -> Verdict:
    return judge(reference(case, batch), run_server(case, batch, work))


def sanitizer_signature(stderr: str) -> str:
    """``asan <kind> in <function> (<file:line>)`` or ``ubsan <file:line>: <what>``; "" if none."""
    if not SANITIZER_REPORT.search(stderr):
        return ""
    ub = re.search(r"([\w./-]+):(\d+):\d+: runtime error: ([^0-9\n]*)", stderr)
    if ub:
        return f"ubsan {Path(ub[1]).name}:{ub[2]}: {ub[3].strip()}"
    kind = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", stderr)
    frames = re.findall(r"#\d+ 0x[0-9a-f]+ in (\w+) ([\w./-]+:\d+)", stderr)
    ours = [(f, where) for f, where in frames if not f.startswith("__") and "/libsanitizer/" not in where]
    where = f" in {ours[0][0]} ({Path(ours[0][1]).name})" if ours else ""
    return f"asan {kind[1] if kind else 'report'}{where}"


def sanitizer_excerpt(stderr: str, lines: int = 30) -> str:
    """The report from its first line on (the stack, not the shadow memory dump)."""
    m = SANITIZER_REPORT.search(stderr)
    start = stderr.rfind("\n", 0, m.start()) + 1 if m else 0
    return "\n".join(stderr[start:].splitlines()[:lines])


def same_failure(a: str, b: str) -> bool:
    """Do signatures ``a`` and ``b`` tell of one fault?  Sanitizer reports and crashes: if
    equal; mismatches: if a drop reason differs the same way in both (or both differ in
    outputs alone), since a batch cut down shows a part of what the whole showed."""
    if not (a.startswith("mismatch:") and b.startswith("mismatch:")):
        return a == b
    return bool(set(a.split()[1:]) & set(b.split()[1:]) - {"drops"})


def _mismatch(want: Outputs, got: Outputs) -> str:
    reasons = sorted(set(want[1]) | set(got[1]))
    drops = [f"{'+' if got[1][r] > want[1][r] else '-'}{r}" for r in reasons if got[1][r] != want[1][r]]
    return "mismatch:" + (f" drops {' '.join(drops)}" if drops else "") + (" outputs" if got[0] != want[0] else "")


def _difference(want: Outputs, got: Outputs) -> str:
    lines = [f"drops: reference {dict(sorted(want[1].items()))}", f"       server    {dict(sorted(got[1].items()))}"]
    for port in sorted(set(want[0]) | set(got[0])):
        w, g = want[0].get(port, Counter()), got[0].get(port, Counter())
        for label, extra in (("only the reference", w - g), ("only the server", g - w)):
            lines += [f"port {port}, {label} sent: {data.hex()[:160]}" for data in list(extra)[:3]]
    return "\n".join(lines)


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---- minimising ---------------------------------------------------------------------------------


def ddmin(items: list[T], fails: Callable[[list[T]], bool], deadline: float) -> list[T]:
    """A smallest subset of ``items`` (order kept) that still ``fails`` (Zeller's delta debugging:
    try each of n chunks alone, then each complement; split finer when neither fails)."""
    n = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = -(-len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        smaller = next((c for c in chunks if fails(c)), None)
        if smaller is not None:
            items, n = smaller, 2
            continue
        rest = next((r for i in range(len(chunks)) if len(chunks) > 2
                     for r in [[x for j, c in enumerate(chunks) if j != i for x in c]] if fails(r)), None)
        if rest is not None:
            items, n = rest, max(n - 1, 2)
        elif n >= len(items):
            break
        else:
            n = min(len(items), 2 * n)
    return items


def shrink(data: bytes, fails: Callable[[bytes], bool], deadline: float) -> bytes:
    """``data`` made shorter while it still ``fails``: the shortest failing prefix found by
    bisection, then chunks of halving size cut out wherever that keeps it failing."""
    lo, hi = 0, len(data)
    while lo < hi and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        if fails(data[:mid]):
            hi = mid
        else:
            lo = mid + 1
    data = data[:hi]
    size = max(1, len(data) // 2)
    while size >= 1 and time.monotonic() < deadline:
        pos = 0
        while pos < len(data) and time.monotonic() < deadline:
            cut = data[:pos] + data[pos + size:]
            if fails(cut):
                data = cut
            else:
                pos += size
        size //= 2
    return data


def minimise(batch: Batch, fails: Callable[[Batch], bool], seconds: float) -> Batch:
    """The failing packets of ``batch`` (ddmin), their bytes shrunk, then the entries they need."""
    deadline = time.monotonic() + seconds
    packets = ddmin(batch.packets(), lambda ps: fails(batch.with_packets(ps)), deadline)
    for i, (port, data) in enumerate(packets):
        def alone(d: bytes, i: int = i, port: int = port) -> bool:
            return fails(batch.with_packets([*packets[:i], (port, d), *packets[i + 1:]]))
        packets[i] = (port, shrink(data, alone, deadline))
    small = batch.with_packets(packets)
    entries = ddmin(small.entries(), lambda es: fails(small.with_entries(es)), deadline)
    if len(entries) == 1 and fails(small.with_entries([])):
        entries = []
    return small.with_entries(entries)


# ---- reproducers --------------------------------------------------------------------------------


def save(out_dir: Path, case: Case, seed: int, batch: Batch, verdict: Verdict) -> Path:
    """``in.pcap`` + ``entries.json`` + ``case.json`` + a README saying how to replay them."""
    folder = out_dir / f"{case.example}.{case.target.replace('+', '-')}-" \
                       f"{hashlib.sha256(verdict.signature.encode()).hexdigest()[:10]}"
    folder.mkdir(parents=True, exist_ok=True)
    write_pcap(folder / "in.pcap", frames(case, batch))
    entries = {name: [entry_json(case.placed, name, e) for e in rows] for name, rows in batch.tables.items() if rows}
    (folder / "entries.json").write_text(json.dumps(entries, indent=1) + "\n")
    (folder / "case.json").write_text(json.dumps({"example": case.example, "target": case.target, "seed": seed,
                                                  "signature": verdict.signature}) + "\n")
    framing = "behind bridge headers, as the switch sends them" if case.hybrid else \
        "each after its 4-byte logical port, as nf --tagged reads them"
    (folder / "README").write_text(
        f"{verdict.signature}\n\n"
        f"{case.label}, seed {seed}: {len(batch)} frame(s) in in.pcap ({framing}), "
        f"entries in entries.json (nfc run --entries format).\n"
        f"replay: .venv/bin/python -m tests.packet_fuzz --replay {folder}\n\n{verdict.detail}\n")
    return folder


def load_saved(folder: Path, case: Case) -> Batch:
    """The batch a reproducer folder holds, for ``case`` (its example built for its target)."""
    tables: dict[str, list[Entry]] = {}
    for spec in load_entries(folder / "entries.json"):
        t = case.placed.program.tables[spec.table]
        tables.setdefault(spec.table, []).append(
            Entry(tuple(Match(*spec.match[k.name]) for k in t.keys), dict(spec.values), spec.priority))
    packets = [bytes(d) for d, _meta in RawPcapReader(str(folder / "in.pcap"))]
    if case.hybrid:
        return Batch(tables, {case.switch_port: packets})
    return Batch(tables, {}).with_packets([(TAG.unpack_from(d)[0], d[TAG.size:]) for d in packets])


def replay(folder: Path) -> Verdict:
    """Build the reproducer's example for its target and run its batch again."""
    meta = json.loads((folder / "case.json").read_text())
    with tempfile.TemporaryDirectory(prefix="nfc-replay-") as tmp:
        case = build_case(meta["example"], meta["target"], Path(tmp))
        return check(case, load_saved(folder, case), Path(tmp) / "run")


def write_pcap(path: Path, packets: Sequence[bytes]) -> None:
    with RawPcapWriter(str(path), linktype=1) as w:
        for p in packets:
            w.write(p)


# ---- the loop -----------------------------------------------------------------------------------


@dataclass
class Summary:
    inputs: int = 0
    batches: int = 0
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    failures: dict[str, tuple[str, Path | None]] = field(default_factory=dict)  # signature -> (case, saved)

    def report(self) -> str:
        lines = [f"{self.inputs} inputs in {self.seconds:.0f} s: {self.batches} batches "
                 f"({self.inputs * 60 / max(self.seconds, 1):.0f} inputs/min); "
                 + ", ".join(f"{k} {n}" for k, n in self.kinds.most_common()),
                 *(f"skipped {s}" for s in self.skipped),
                 f"{len(self.failures)} distinct failures"]
        lines += [f"  {sig}  [{label}]" + (f" -> {saved}" if saved else "")
                  for sig, (label, saved) in sorted(self.failures.items())]
        return "\n".join(lines)


def build_all(folder: Path, summary: Summary, deadline: float = float("inf")) -> list[Case]:
    """Every example for every target that builds a server program (the others are skipped)."""
    cases: list[Case] = []
    for example in examples():
        for target in TARGETS:
            if time.monotonic() >= deadline:
                return cases
            try:
                cases.append(build_case(example, target, folder))
            except NotBuilt as e:
                summary.skipped.append(f"{example} --target {target}: {e}")
    return cases


def fuzz(cases: Sequence[Case], seed: int, work: Path, deadline: float, out_dir: Path | None = None,
         packets: int = PACKETS, minimise_s: float = 120.0, summary: Summary | None = None,
         progress: Callable[[str], None] = print) -> Summary:
    """Batches from seeds ``seed``, ``seed + 1``, ... over every case in turn until ``deadline``
    (at least one round); each new failure is minimised and saved to ``out_dir``."""
    summary = summary or Summary()
    started = time.monotonic()
    for n in range(1 << 30):
        case = cases[n % len(cases)]
        if n >= len(cases) and time.monotonic() >= deadline:
            break
        s = seed + n // len(cases)
        batch, kinds = make_batch(case, s, packets)
        verdict = check(case, batch, work)
        summary.batches += 1
        summary.inputs += len(batch)
        summary.kinds += kinds
        if verdict.failed and not any(same_failure(verdict.signature, f) for f in summary.failures):
            progress(f"{case.label}, seed {s}: {verdict.signature}")
            saved = None
            if out_dir is not None:
                def same(b: Batch, case: Case = case, sig: str = verdict.signature) -> bool:
                    return same_failure(check(case, b, work).signature, sig)
                small = minimise(batch, same, minimise_s)
                saved = save(out_dir, case, s, small, check(case, small, work))
            summary.failures[verdict.signature] = (case.label, saved)
    summary.seconds += time.monotonic() - started
    return summary


def main(minutes: float, seed: int = 0, out_dir: str | Path = "build/fuzz/packet_fuzz") -> int:
    """Fuzz for ``minutes`` (the builds included); save each failure, minimised, to ``out_dir``;
    print a summary.  Exit status 1 if anything failed (for ``build.py fuzz``)."""
    deadline = time.monotonic() + minutes * 60
    summary = Summary()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nfc-packet-fuzz-") as tmp:
        cases = build_all(Path(tmp), summary, deadline)
        summary.seconds = time.monotonic() - started
        if cases:
            fuzz(cases, seed, Path(tmp) / "run", deadline, Path(out_dir), summary=summary,
                 progress=lambda s: print(s, flush=True))
    print(summary.report(), flush=True)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="build/fuzz/packet_fuzz")
    ap.add_argument("--replay", type=Path, help="run a saved reproducer again (exit 1 if it still fails)")
    a = ap.parse_args()
    if a.replay is not None:
        v = replay(a.replay)
        print(v.signature or "passes", v.detail, sep="\n")
        sys.exit(1 if v.failed else 0)
    sys.exit(main(a.minutes, a.seed, a.out))
