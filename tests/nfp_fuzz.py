"""Grammar-aware fuzzing of nfc's front end and compiler passes (issue 17).

Inputs are the examples and the ``tests/corpus`` programs, mutated at the level of tokens
(delete, duplicate, swap; a number replaced by a boundary value such as 0, 2^k±1, a
5000-digit number, ``-1`` or ``007``; a name replaced by a keyword of nfc, C, P4 or Python
or by another name of the file; a declaration spliced in from another file; an expression
nested deeper; a keyword glued to the next name) and of bytes (stray characters, CR or
U+2028 line ends, a byte-order mark, invalid UTF-8, truncation).

The oracle is ``nfc build`` itself, run in-process (``nfc.cli.main``) in a forked child
with a memory limit and a time bound: it must end with diagnostics (each naming a line of
the file) or with a build whose proof holds; never an internal error, a signal, a hang or
a counterexample.  A program the front end accepts must also survive ``nfc fmt``, and its
formatted text must check the same way.

Use: ``python -m tests.nfp_fuzz --minutes 10 --seed 1 --out fuzz-out`` or ``main(minutes,
seed, out_dir)``; ``fuzz(count=300, ...)`` runs a fixed number of inputs (the CI test).
Every failure is minimised by deleting tokens and saved to the output folder, one file per
distinct failure (``<kind>-<hash>.nfp`` with the report beside it in ``.txt``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["Mutator", "Outcome", "fuzz", "main", "minimise", "run_one", "seed_programs"]

TARGETS = ("tofino+dpdk", "tofino+dpdk", "tofino+dpdk", "dpdk", "tofino")
# Per input, in CPU seconds: more is a hang (the largest example builds, proves, formats and
# checks in some 6 s).  Wall time may be three times as long (a loaded machine) before the
# child is killed as hung in a blocking call.
TIMEOUT_S = 60.0
MAX_INPUT_BYTES = 256 * 1024
MEMORY_HEADROOM = 3 * 2**30  # a child may grow this far beyond the parent's address space

# ---- tokens -------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<number>[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}|\d+\.\d+\.\d+\.\d+|0[xb][0-9a-fA-F_]*|\d+(?:\.\d+)?[A-Za-z%]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>&&&|\.\.|\+\+|<<|>>|==|!=|<=|>=|&&|\|\||->|.)
""", re.S | re.X)


@dataclass
class Piece:
    kind: str  # ws | comment | string | number | name | op
    text: str


def lex(text: str) -> list[Piece]:
    """``text`` as pieces whose concatenation is ``text`` again (any character is some piece)."""
    return [Piece(m.lastgroup or "op", m.group()) for m in _TOKEN.finditer(text)]


def join(pieces: Iterable[Piece]) -> str:
    return "".join(p.text for p in pieces)


def _significant(pieces: list[Piece]) -> list[int]:
    return [i for i, p in enumerate(pieces) if p.kind not in ("ws", "comment")]


# ---- mutations ----------------------------------------------------------------------------

def _boundaries() -> list[str]:
    powers = [f"{sign}{2**k + d}" for k in (7, 8, 9, 15, 16, 31, 32, 53, 63, 64, 2048) for d in (-1, 0, 1)
              for sign in ("",)]
    return [*powers, "0", "1", "00", "007", "0x", "0x_", "0x0", "0b", "0b_", "0b1", "-1", "-0", "1" + "0" * 617,
            "9" * 700, "9" * 5000, "0x" + "f" * 600, "1K", "16M", "4Gi", "4G", "0s", "1ns", "9" * 30 + "s",
            "1" + "0" * 400 + "Mpps", "1.5", "0.0", "100%", "101%", "0%", "256.0.0.1", "010.0.0.1",
            "255.255.255.255", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00", "1..2", "65535..0", "99999999999GiB",
            "0GHz", "0Gbps", "1e9", "16Q", "0.00000015s", "0.1", "123456789012345678.5"]


BOUNDARIES = _boundaries()
KEYWORDS = (
    # nfc
    "table state stage pipeline parser header packet metadata import const register counter meter extern ports "
    "target deployment key value hit miss lookup push pop forward drop punt insert remove refresh verify extract "
    "transition select accept default if else let true false bit bool std meta valid checksum_ok csum_update "
    "crc16 crc32 size active cache pin switch server timeout holds_ports when as requires exact lpm ternary range "
    "shard by hash servers server_ports "
    # C
    "int char void struct union return static unsigned goto sizeof main NULL errno while for do switch case "
    "break continue typedef extern volatile register auto inline restrict _Bool uint8_t uint32_t rte_mbuf "
    # P4
    "control apply action actions default_action entries in out inout bit varbit error match_kind "
    "packet_in packet_out standard_metadata ingress egress hdr NoAction mark_to_drop exit "
    # Python
    "def class lambda None True False self yield async await import from global nonlocal print object "
    "__init__ __class__ __dict__ type str"
).split()
STRINGS = ['""', '"/dev/zero"', '"/dev/null"', '"/"', '"."', '"t.nfp"', '"std/"', '"std/../../../etc/passwd"',
           '"std/headers.nfp"', '"fifo"', '"' + "a" * 5000 + '"', '"*/"', '"\\"']
NOISE = ["\r", "\u2028", "\u2029", "\ufeff", "\0", "\t", "\x0c", "\x0b", "\x85", "{", "}", "(", ")", ";", '"',
         "/*", "*/", "//", "\\", "\u202e", "é", "\udcff", "\udcc3"]  # \udcXX: a raw invalid byte


PROGRESS_EVERY = 1000  # inputs between two progress lines of a long run
# a longer literal is left to the other mutations: Python refuses int() of over 4,300 digits
MAX_TWEAK_DIGITS = 4000


class Mutator:
    """Mutated programs from ``seeds`` (name -> text); ``mutate(i)`` is the same for the same seed and i."""

    def __init__(self, seeds: dict[str, str], seed: int) -> None:
        self.seeds = seeds
        self.names = sorted(seeds)
        self.seed = seed
        # weighted towards mutations that keep the syntax, so that most inputs reach the passes
        self.ops: list[Callable[[random.Random, list[Piece]], list[Piece]]] = [
            *[self._literal] * 4, *[self._tweak] * 4, *[self._rename] * 3, *[self._splice] * 2,
            *[self._deepen] * 2, self._glue, self._string, self._delete, self._duplicate, self._swap, self._noise,
            self._line_ends,
        ]

    def mutate(self, i: int) -> tuple[str, bytes, list[str]]:
        """Input ``i``: (seed file, bytes, names of the mutations applied)."""
        rnd = random.Random(f"{self.seed}:{i}")
        name = rnd.choice(self.names)
        pieces = lex(self.seeds[name])
        applied = []
        for _ in range(rnd.choice((1, 1, 1, 1, 2, 2, 3))):
            op = rnd.choice(self.ops)
            pieces = op(rnd, pieces)
            applied.append(op.__name__.strip("_"))
        data = join(pieces).encode("utf-8", "surrogateescape")
        return name, data[:MAX_INPUT_BYTES], applied

    @staticmethod
    def _pick(rnd: random.Random, pieces: list[Piece], kinds: tuple[str, ...] = ()) -> int | None:
        idx = [i for i in _significant(pieces) if not kinds or pieces[i].kind in kinds]
        return rnd.choice(idx) if idx else None

    def _delete(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        sig = _significant(pieces)
        if not sig:
            return pieces
        start = rnd.randrange(len(sig))
        drop = set(sig[start:start + rnd.choice((1, 1, 2, 3, 8))])
        return [p for i, p in enumerate(pieces) if i not in drop]

    def _duplicate(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        sig = _significant(pieces)
        if not sig:
            return pieces
        a = rnd.randrange(len(sig))
        b = min(len(sig) - 1, a + rnd.choice((0, 1, 4, 16)))
        run = pieces[sig[a]:sig[b] + 1]
        times = rnd.choice((1, 1, 2, 50))
        return pieces[:sig[b] + 1] + [Piece("ws", " ")] + run * times + pieces[sig[b] + 1:]

    def _swap(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        sig = _significant(pieces)
        if len(sig) < 2:
            return pieces
        a = rnd.randrange(len(sig))
        b = min(len(sig) - 1, a + rnd.choice((1, 2, 5))) if rnd.random() < 0.7 else rnd.randrange(len(sig))
        out = list(pieces)
        out[sig[a]], out[sig[b]] = out[sig[b]], out[sig[a]]
        return out

    def _replace(self, rnd: random.Random, pieces: list[Piece], kinds: tuple[str, ...], pool: list[str],
                 kind: str) -> list[Piece]:
        i = self._pick(rnd, pieces, kinds)
        if i is None or not pool:
            return pieces
        out = list(pieces)
        out[i] = Piece(kind, rnd.choice(pool))
        return out

    def _literal(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        return self._replace(rnd, pieces, ("number",), BOUNDARIES, "number")

    def _tweak(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        """A decimal number (with its unit, if any) made a little or a lot larger or smaller."""
        idx = [i for i in _significant(pieces) if pieces[i].kind == "number" and pieces[i].text[:1].isdigit()
               and len(pieces[i].text) <= MAX_TWEAK_DIGITS and re.fullmatch(r"\d+[A-Za-z%]*", pieces[i].text)]
        if not idx:
            return pieces
        i = rnd.choice(idx)
        m = re.fullmatch(r"(\d+)(.*)", pieces[i].text)
        assert m
        n = int(m.group(1))
        n = rnd.choice((n + 1, n - 1, n * 2, n // 2, n * 1000, n << 32, 0, 1))
        out = list(pieces)
        out[i] = Piece("number", f"{max(n, 0)}{m.group(2)}")
        return out

    def _rename(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        own = sorted({p.text for p in pieces if p.kind == "name"})
        pool = own if rnd.random() < 0.5 else [*KEYWORDS, "x" * 300, "_", "__", "a" + "b" * 64]
        return self._replace(rnd, pieces, ("name",), pool, "name")

    def _string(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        return self._replace(rnd, pieces, ("string", "number"), STRINGS, "string")

    def _splice(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        """A top-level declaration of another seed, inserted before one of this file's (or replacing it)."""
        other = _declarations(lex(self.seeds[rnd.choice(self.names)]))
        mine = _declarations(pieces)
        if not other:
            return pieces
        decl = rnd.choice(other)
        if not mine:
            return [*pieces, Piece("ws", "\n"), *decl]
        at = rnd.choice(mine)
        start = pieces.index(at[0])
        end = start + len(at) if rnd.random() < 0.4 else start
        return [*pieces[:start], *decl, Piece("ws", "\n"), *pieces[end:]]

    def _deepen(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        """An operand nested k levels (k around the front end's limit of 64 and far beyond)."""
        i = self._pick(rnd, pieces, ("name", "number"))
        if i is None:
            return pieces
        k = rnd.choice((2, 30, 63, 64, 65, 200, 2000))
        t = pieces[i].text
        wrapped = rnd.choice((
            "(" * k + t + ")" * k,
            t + f" + {t}" * k,
            "~" * k + t,
            "!" * k + t,
            " && ".join([f"({t} == {t})"] * k),
            "if (true) { " * k + f"{t} = {t};" + " }" * k,
        ))
        out = list(pieces)
        out[i] = Piece("op", wrapped)
        return out

    def _glue(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        """Remove the space between a keyword (or number) and the next name: ``table fib`` -> ``tablefib``."""
        cands = [i for i in range(len(pieces) - 2) if pieces[i].kind in ("name", "number")
                 and pieces[i + 1].kind == "ws" and pieces[i + 2].kind == "name"]
        if not cands:
            return pieces
        i = rnd.choice(cands)
        return pieces[:i + 1] + pieces[i + 2:]

    def _noise(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        text = join(pieces)
        for _ in range(rnd.choice((1, 1, 3, 10))):
            at = rnd.randrange(len(text) + 1)
            ch = rnd.choice(NOISE) if rnd.random() < 0.7 else chr(rnd.randrange(32, 127))
            rest = "" if rnd.random() < 0.15 else ch + text[at + rnd.choice((0, 0, 1)):]  # "": truncated
            text = text[:at] + rest
        return lex(text)

    def _line_ends(self, rnd: random.Random, pieces: list[Piece]) -> list[Piece]:
        text = join(pieces)
        text = rnd.choice((text.replace("\n", "\r"), text.replace("\n", "\r\n"), "\ufeff" + text,
                           text.replace("\n", "\u2028", rnd.randrange(1, 20)), text.replace("\n", "\x0c\n")))
        return lex(text)


_TOP = frozenset("import const header packet metadata parser table state register counter meter extern stage "
                 "pipeline ports target deployment".split())


def _declarations(pieces: list[Piece]) -> list[list[Piece]]:
    """Top-level declarations: a top keyword at brace depth 0, up to its closing brace or ';'."""
    out: list[list[Piece]] = []
    depth, start = 0, None
    for i, p in enumerate(pieces):
        if depth == 0 and start is None and p.kind == "name" and p.text in _TOP:
            start = i
        if p.text == "{":
            depth += 1
        elif p.text == "}":
            depth -= 1
        if start is not None and depth <= 0 and p.text in ("}", ";"):
            out.append(pieces[start:i + 1])
            start, depth = None, max(depth, 0)
    return out


def seed_programs() -> dict[str, str]:
    """The programs mutated: every example and every program of tests/corpus."""
    files = sorted((ROOT / "examples").glob("*.nfp")) + sorted((ROOT / "tests/corpus").glob("*.nfp"))
    return {str(f.relative_to(ROOT)): f.read_text() for f in files}


# ---- the oracle ---------------------------------------------------------------------------

_DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning)\[(?P<code>[EW]\d{3})\]: ",
                   re.M)
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)
_EXC = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::|$)")


@dataclass(frozen=True)
class Outcome:
    """What one input did.  ``kind``: ok | diagnostics (both fine) | crash | hang | signal |
    counterexample | no-diagnostic | bad-location | fmt | c-compile (failures)."""

    kind: str
    detail: str = ""
    signature: str = ""  # the same failure has the same signature (used to deduplicate and minimise)

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "diagnostics")


def _in_child(data: bytes, target: str, work: Path) -> Outcome:
    """Run ``nfc build`` (then ``fmt`` and ``check``) on ``data`` in this (forked) process."""
    from nfc import cli

    src = work / "t.nfp"
    src.write_bytes(data)
    with contextlib.suppress(OSError):
        os.mkfifo(work / "fifo")  # an import of "fifo" must be refused, not wait for a writer
    rc, out = _nfc(cli.main, ["build", str(src), "--target", target, "-o", str(work / "out")])
    first = _judge(rc, out, data, src)
    if first.kind == "ok":  # the switch program passed the P4 lint inside the build; the server's C:
        first = _compile_server(work / "out" / "server") or first
    if first.failed or not _front_end_clean(out):
        return first
    return _fmt_round_trip(cli.main, src, work) or first


@functools.cache
def _dpdk_cflags() -> tuple[str, ...]:
    import subprocess

    r = subprocess.run(["pkg-config", "--cflags", "libdpdk"], capture_output=True, text=True)
    return tuple(r.stdout.split()) if r.returncode == 0 else ()


def _compile_server(folder: Path) -> Outcome | None:
    """The generated server program compiles warning-free as its Makefile builds it
    (``-O2 -Wall -Wextra -Werror``); skipped where DPDK's headers are missing."""
    import subprocess

    if not (folder / "nf.c").is_file() or not _dpdk_cflags():
        return None
    r = subprocess.run(["cc", *_dpdk_cflags(), "-O2", "-march=native", "-Wall", "-Wextra", "-Werror", "-std=gnu11",
                        "-c", "-o", os.devnull, "nf.c"], capture_output=True, text=True, cwd=folder)
    if r.returncode == 0:
        return None
    first = next((ln for ln in r.stderr.splitlines() if "error:" in ln), r.stderr[:200])
    return Outcome("c-compile", r.stderr[-4000:], "c-compile " + re.sub(r"^[^:]*:\d+:\d+: ", "", first)[:120])


def _nfc(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # main catches Exception; anything else escaping it is a crash too
            import traceback
            traceback.print_exc()
            return 3, buf.getvalue() + f"\nnfc: escaped main: {type(e).__name__}"
    return rc, buf.getvalue()


def _front_end_clean(out: str) -> bool:
    """No front-end error (codes below E060: parse, names, types, validity)."""
    return not any(m["sev"] == "error" and m["code"] < "E060" for m in _DIAG.finditer(out))


def _judge(rc: int, out: str, data: bytes, src: Path) -> Outcome:
    if rc == 3:
        return _crash(out)
    if "NOT proved" in out and "input on port" in out:
        return Outcome("counterexample", out[-3000:], "counterexample")
    if rc == 0:
        return _located(out, data, src) or Outcome("ok")
    if rc == 1 and any(m["sev"] == "error" for m in _DIAG.finditer(out)):
        return _located(out, data, src) or Outcome("diagnostics", _codes(out))
    return Outcome("no-diagnostic", f"exit {rc}\n{out[-3000:]}", f"no-diagnostic exit {rc}")


def _codes(out: str) -> str:
    return " ".join(sorted({m["code"] for m in _DIAG.finditer(out)}))


def _located(out: str, data: bytes, src: Path) -> Outcome | None:
    """Every diagnostic in the input file names one of its lines and quotes it."""
    from lang.text import normalize

    lines = normalize(data.decode("utf-8", "replace")).split("\n")
    for m in _DIAG.finditer(out):
        if Path(m["file"]) != src:
            continue
        line, col = int(m["line"]), int(m["col"])
        if not 1 <= line <= len(lines) or not 1 <= col <= len(lines[line - 1]) + 1:
            return Outcome("bad-location", out[m.start():m.start() + 2000],
                           f"bad-location {m['code']} line {line}/{len(lines)} col {col}")
    return None


def _crash(out: str) -> Outcome:
    """An internal error: its signature is the exception type and the innermost frame of nfc's own code."""
    frames = [f for f in _FRAME.finditer(out) if str(ROOT) in f["file"] and "/.venv/" not in f["file"]]
    where = ""
    if frames:
        f = frames[-1]
        where = f" at {Path(f['file']).relative_to(ROOT)}:{f['func']}"
    return Outcome("crash", out[-6000:], f"{_exception_type(out)}{where}")


def _exception_type(out: str) -> str:
    """The type named on the line that ends the last traceback in ``out``."""
    frames = list(_FRAME.finditer(out))
    tail = out[frames[-1].end():].split("\n")[2:] if frames else []
    for line in tail:
        m = _EXC.match(line)
        if m:
            return m["type"].rsplit(".", 1)[-1]
    return "internal error"


def _fmt_round_trip(main: Callable[[list[str]], int], src: Path, work: Path) -> Outcome | None:
    """A program the front end accepts formats, and its formatted text checks as it does."""
    rc, out = _nfc(main, ["fmt", str(src)])
    if rc == 3:
        return _crash(out)
    if rc != 0:
        return None
    formatted = work / "formatted.nfp"
    formatted.write_text(out)
    rc1, out1 = _nfc(main, ["check", str(src)])
    rc2, out2 = _nfc(main, ["check", str(formatted)])
    if 3 in (rc1, rc2):
        return _crash(out1 if rc1 == 3 else out2)
    if (rc1, _codes(out1)) != (rc2, _codes(out2)):
        return Outcome("fmt", f"check of the source: exit {rc1} {_codes(out1)}\ncheck of nfc fmt's output: exit {rc2} "
                       f"{_codes(out2)}\n{out2[-2000:]}", f"fmt changes check: {_codes(out1)} -> {_codes(out2)}")
    return None


def _child_main(data: bytes, target: str, work: str, timeout: float, conn: Connection) -> None:
    """Entry of the forked child: limit memory and CPU time, silence the descriptors, report
    one Outcome."""
    with open("/proc/self/status") as f:
        vm = next((int(x.split()[1]) * 1024 for x in f if x.startswith("VmSize:")), 0)
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_HEADROOM, vm + MEMORY_HEADROOM))
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU: a hang
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.environ["NFC_DEBUG"] = "1"
    started = time.monotonic()
    try:
        outcome = _in_child(data, target, Path(work))
    except BaseException as e:  # the oracle itself failed: still a finding, never a silent exit
        outcome = Outcome("crash", f"{type(e).__name__}: {e}", f"{type(e).__name__} in the fuzz harness")
    conn.send((outcome, time.monotonic() - started))
    conn.close()


@dataclass
class _Running:
    key: int
    proc: multiprocessing.process.BaseProcess
    conn: Connection
    work: str
    started: float


def run_many(inputs: Iterable[tuple[int, bytes, str]], jobs: int = 2,
             timeout: float = TIMEOUT_S) -> Iterator[tuple[int, Outcome, float]]:
    """Run each (key, data, target) in its own forked child, ``jobs`` at a time; yield (key,
    outcome, seconds) as they finish.  A child past ``timeout`` is killed (a hang)."""
    _warm_up()
    todo = iter(inputs)
    running: list[_Running] = []
    exhausted = False
    while running or not exhausted:
        while not exhausted and len(running) < jobs:
            item = next(todo, None)
            exhausted = item is None
            if item is not None:
                running.append(_spawn(*item, timeout))
        if not running:
            break
        wait([r.conn for r in running] + [r.proc.sentinel for r in running], timeout=0.2)
        for r in list(running):
            done = _collect(r, timeout)
            if done is not None:
                running.remove(r)
                shutil.rmtree(r.work, ignore_errors=True)
                yield r.key, *done


def _spawn(key: int, data: bytes, target: str, timeout: float) -> _Running:
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    work = tempfile.mkdtemp(prefix="nfp-fuzz-")
    proc = ctx.Process(target=_child_main, args=(data, target, work, timeout, send), daemon=True)
    proc.start()
    send.close()
    return _Running(key, proc, recv, work, time.monotonic())


def _collect(r: _Running, timeout: float) -> tuple[Outcome, float] | None:
    """The outcome and run time of a finished, dead or overdue child; None while it runs."""
    alive = r.proc.is_alive()  # before the poll: a child that sends and exits between the two is read
    if r.conn.poll():
        try:
            result: tuple[Outcome, float] = r.conn.recv()
        except EOFError:
            result = None  # type: ignore[assignment]
        r.proc.join(5)
        if result is not None:
            return result
    elapsed = time.monotonic() - r.started
    if not alive:
        code = r.proc.exitcode
        if code == -signal.SIGXCPU:
            return Outcome("hang", f"more than {timeout:.0f} s of CPU time", "hang"), elapsed
        return Outcome("signal", f"child ended with exit code {code} and no result", f"signal {code}"), elapsed
    if elapsed > 3 * timeout:
        r.proc.kill()
        r.proc.join()
        return Outcome("hang", f"no result after {elapsed:.0f} s (blocked?)", "hang"), elapsed
    return None


def _warm_up() -> None:
    """Import and build what every child needs once, before forking (the grammar's tables, z3)."""
    import nfc.cli  # noqa: F401
    from lang.parser import _lark

    _lark()


def run_one(data: bytes, target: str = "tofino+dpdk", timeout: float = TIMEOUT_S) -> Outcome:
    """The outcome of one input (in a forked child)."""
    return next(o for _, o, _ in run_many([(0, data, target)], 1, timeout))


# ---- minimising and the campaign ------------------------------------------------------------

def minimise(data: bytes, target: str, signature: str, budget_s: float = 120.0, jobs: int = 2,
             timeout: float = TIMEOUT_S) -> bytes:
    """``data`` with as many top-level declarations, then runs of tokens, then single tokens
    deleted as keep the failure ``signature`` (greedy, ``jobs`` candidates at a time; stops at
    ``budget_s`` with the smallest input so far)."""
    pieces = lex(data.decode("utf-8", "surrogateescape"))
    deadline = time.monotonic() + budget_s

    def keeps(candidates: list[list[Piece]]) -> int | None:
        batch = [(k, join(c).encode("utf-8", "surrogateescape"), target) for k, c in enumerate(candidates)]
        kept = [k for k, o, _ in run_many(batch, jobs, timeout) if o.signature == signature]
        return min(kept) if kept else None

    for tidy in (_without_comments, _tight_spaces):
        candidate = tidy(pieces)
        if candidate != pieces and keeps([candidate]) is not None:
            pieces = candidate
    pieces = _greedy(pieces, _declaration_units, keeps, jobs, deadline)
    chunk = max(1, len(_significant(pieces)) // 8)
    while chunk >= 1 and time.monotonic() < deadline:
        pieces = _greedy(pieces, functools.partial(_token_units, chunk=chunk), keeps, jobs, deadline)
        chunk //= 2
    return join(pieces).encode("utf-8", "surrogateescape")


def _without_comments(pieces: list[Piece]) -> list[Piece]:
    return [p for p in pieces if p.kind != "comment"]


def _tight_spaces(pieces: list[Piece]) -> list[Piece]:
    """Each run of white space one space, or one line end if it held any."""
    return [Piece("ws", "\n" if "\n" in p.text else " ") if p.kind == "ws" else p for p in pieces]


def _declaration_units(pieces: list[Piece]) -> list[set[int]]:
    ids = {id(p): i for i, p in enumerate(pieces)}
    return [{ids[id(p)] for p in decl} for decl in _declarations(pieces)]


def _token_units(pieces: list[Piece], chunk: int) -> list[set[int]]:
    sig = _significant(pieces)
    return [set(sig[s:s + chunk]) for s in range(0, len(sig), chunk)]


def _greedy(pieces: list[Piece], units: Callable[[list[Piece]], list[set[int]]],
            keeps: Callable[[list[list[Piece]]], int | None], jobs: int, deadline: float) -> list[Piece]:
    """Delete each unit (in order) whose deletion keeps the failure; ``jobs`` tries at a time."""
    cursor = 0
    while time.monotonic() < deadline:
        us = units(pieces)[cursor:cursor + jobs]
        if not us:
            break
        candidates = [[p for i, p in enumerate(pieces) if i not in u] for u in us]
        k = keeps(candidates)
        if k is None:
            cursor += len(us)
        else:
            pieces, cursor = candidates[k], cursor + k  # the units after it moved up: try this place again
    return pieces


@dataclass
class Summary:
    inputs: int = 0
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    slowest: tuple[float, str] = (0.0, "")
    failures: dict[str, tuple[str, Outcome, Path | None]] = field(default_factory=dict)  # signature -> ...

    def report(self) -> str:
        lines = [f"{self.inputs} inputs in {self.seconds:.0f} s: "
                 + ", ".join(f"{k} {n}" for k, n in self.kinds.most_common()),
                 "mutations: " + ", ".join(f"{k} {n}" for k, n in self.ops.most_common()),
                 f"slowest input: {self.slowest[0]:.1f} s ({self.slowest[1]})",
                 f"{len(self.failures)} distinct failures"]
        for sig, (origin, outcome, saved) in sorted(self.failures.items()):
            lines.append(f"  {sig}  [from {origin}]" + (f" -> {saved}" if saved else ""))
            if not saved:
                lines += ["    " + x for x in outcome.detail.strip().splitlines()[-12:]]
        return "\n".join(lines)


def fuzz(count: int | None = None, seconds: float | None = None, seed: int = 0, out_dir: Path | None = None,
         jobs: int = 2, timeout: float = TIMEOUT_S, minimise_s: float = 120.0,
         progress: Callable[[str], None] | None = None) -> Summary:
    """Run ``count`` mutated inputs (or as many as fit in ``seconds``); each new failure is
    minimised (up to ``minimise_s``) and, with ``out_dir``, saved there."""
    mutator = Mutator(seed_programs(), seed)
    summary = Summary()
    started = time.monotonic()
    origins: dict[int, tuple[str, bytes, str, list[str]]] = {}

    def inputs() -> Iterator[tuple[int, bytes, str]]:
        i = 0
        while (count is None or i < count) and (seconds is None or time.monotonic() - started < seconds):
            name, data, ops = mutator.mutate(i)
            target = random.Random(f"{seed}:{i}:target").choice(TARGETS)
            origins[i] = (name, data, target, ops)
            yield i, data, target
            i += 1

    for i, outcome, took in run_many(inputs(), jobs, timeout):
        name, data, target, ops = origins.pop(i)
        summary.inputs += 1
        summary.kinds[outcome.kind] += 1
        summary.ops.update(ops)
        summary.slowest = max(summary.slowest, (took, f"#{i} from {name}"))
        if progress and summary.inputs % PROGRESS_EVERY == 0:  # a long run that dies still tells how far it got
            progress(f"{summary.inputs} inputs, {len(summary.failures)} failure signatures, "
                     f"{time.monotonic() - started:.0f} s")
        if outcome.failed and outcome.signature not in summary.failures:
            if progress:
                progress(f"#{i} ({name}, {'+'.join(ops)}, --target {target}): {outcome.signature}")
            small = minimise(data, target, outcome.signature, minimise_s, jobs, timeout) if minimise_s else data
            saved = _save(out_dir, small, target, name, ops, outcome) if out_dir else None
            summary.failures[outcome.signature] = (name, outcome, saved)
    summary.seconds = time.monotonic() - started
    return summary


def _save(out_dir: Path, data: bytes, target: str, origin: str, ops: list[str], outcome: Outcome) -> Path:
    """``<kind>-<hash>.nfp`` (the input, byte for byte) and a ``.txt`` saying how it fails."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{outcome.kind}-{hashlib.sha256(outcome.signature.encode()).hexdigest()[:10]}"
    (out_dir / f"{stem}.nfp").write_bytes(data)
    (out_dir / f"{stem}.txt").write_text(
        f"signature: {outcome.signature}\nreproduce: nfc build {stem}.nfp --target {target}\n"
        f"mutated from {origin} by {', '.join(ops)}\n\n{outcome.detail}\n")
    return out_dir / f"{stem}.nfp"


def main(minutes: float, seed: int = 0, out_dir: str | Path = "fuzz-out", jobs: int | None = None) -> int:
    """Fuzz for ``minutes``; save each failing input, minimised, to ``out_dir``; print a summary.
    Exit status 1 if anything failed (for ``build.py fuzz --minutes N``)."""
    summary = fuzz(seconds=minutes * 60, seed=seed, out_dir=Path(out_dir), jobs=jobs or os.cpu_count() or 2,
                   progress=lambda s: print(s, flush=True))
    print(summary.report())
    return 1 if summary.failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz-out")
    ap.add_argument("--jobs", type=int)
    a = ap.parse_args()
    sys.exit(main(a.minutes, a.seed, a.out, a.jobs))
