"""The .nfp fuzzer (tests/nfp_fuzz.py): a bounded, seeded run in CI, and the fuzzer's own
machinery (a crash, a hang and minimising) checked against failures planted on purpose.

NFC_SLOW=1 runs 2000 inputs instead of 300.  Longer campaigns: ``python -m tests.nfp_fuzz
--minutes N``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.nfp_fuzz import Mutator, fuzz, lex, minimise, run_one, seed_programs
from tests.support import ROOT, needs_dpdk

COUNT = 2000 if os.environ.get("NFC_SLOW") else 300
CRASHES = ROOT / "tests/corpus/fuzz_crashes"

# Failures the fuzzer found outside the front end and not fixed yet: signature -> reproducer
# in tests/corpus/fuzz_crashes/.  A seeded run may meet them; anything else fails the run.
# When one is fixed, its xfail below passes and fails the suite (strict): move it out of
# here, and its reproducer joins the others as a regression input.
KNOWN: dict[str, str] = {}

SMALL = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
parser p { state start { extract eth; extract ipv4; transition accept; } }
table fib { key { ipv4.dst: exact; } value { port: bit<16>; } size = 1K; }
stage route {
  ipv4.ttl = ipv4.ttl - 1;
  lookup fib { hit(r) { forward(r.port); } miss { drop(no_route); } }
}
pipeline main { ports = [0..7]; parser = p; stages = [route]; }
"""


def test_fuzzed_programs_end_in_diagnostics_or_a_build(tmp_path):
    """Mutated examples and corpus programs: ``nfc build`` (then fmt and check) gives
    diagnostics naming a line of the file, or a proved build; never an internal error."""
    summary = fuzz(count=COUNT, seed=17, jobs=2, out_dir=tmp_path, minimise_s=30)
    unknown = {sig: f for sig, f in summary.failures.items() if sig not in KNOWN}
    assert not unknown, summary.report()
    assert summary.inputs == COUNT
    assert summary.kinds["ok"] >= COUNT // 50, summary.report()  # some inputs get through every pass


@pytest.mark.parametrize("signature", sorted(KNOWN))
@pytest.mark.xfail(strict=True, reason="a known failure outside the front end (see the reproducer's comment)")
def test_known_fuzz_crash_is_fixed(signature):
    assert not run_one((CRASHES / KNOWN[signature]).read_bytes()).failed


@pytest.mark.parametrize("name", sorted(p.name for p in CRASHES.glob("*.nfp") if p.name not in KNOWN.values()))
def test_fixed_fuzz_crash_stays_fixed(name):
    outcome = run_one((CRASHES / name).read_bytes())
    assert not outcome.failed, outcome.detail


def _boom(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("planted")


def test_an_internal_error_is_a_crash_signed_by_its_innermost_frame(monkeypatch):
    import lang.check

    monkeypatch.setattr(lang.check._Checker, "check_all", _boom)  # the forked child inherits the patch
    outcome = run_one(SMALL.encode())
    assert (outcome.kind, outcome.signature) == ("crash", "ZeroDivisionError at tests/test_nfp_fuzz.py:_boom")


def _spin(*args: object, **kwargs: object) -> None:
    while True:
        pass


def test_a_hang_is_stopped_at_the_time_bound(monkeypatch):
    import lang.check

    monkeypatch.setattr(lang.check._Checker, "check_all", _spin)
    started = time.monotonic()
    outcome = run_one(SMALL.encode(), timeout=2)
    assert outcome.kind == "hang" and time.monotonic() - started < 20


def _no_slices(self: object, e: object, scope: object) -> None:
    raise AssertionError("planted: a slice")


def test_minimising_keeps_the_failure_and_deletes_the_rest(monkeypatch):
    import lang.check_expr

    monkeypatch.setattr(lang.check_expr.ExprChecker, "_slice", _no_slices)
    data = SMALL.replace("ipv4.ttl - 1", "ipv4.ttl[7:0] - 1").encode()
    signature = run_one(data).signature
    assert signature == "AssertionError at tests/test_nfp_fuzz.py:_no_slices"
    small = minimise(data, "tofino+dpdk", signature, budget_s=60)
    assert run_one(small).signature == signature
    assert b"[7:0]" in small and len(small) < len(data) / 3, small.decode()


def test_outcomes_of_good_and_bad_programs():
    assert run_one(SMALL.encode()).kind == "ok"
    assert run_one(SMALL.replace("size = 1K", "size = 007").encode()).kind == "diagnostics"


def test_inputs_are_reproducible_from_the_seed_and_use_every_mutation():
    seeds = seed_programs()
    a, b = Mutator(seeds, 5), Mutator(seeds, 5)
    assert [a.mutate(i) for i in range(20)] == [b.mutate(i) for i in range(20)]
    assert a.mutate(1) != a.mutate(2) and Mutator(seeds, 6).mutate(1) != a.mutate(1)
    used = {op for i in range(300) for op in a.mutate(i)[2]}
    assert used == {op.__name__.strip("_") for op in a.ops}


def test_the_lexer_of_the_mutator_loses_no_character():
    for text in [*seed_programs().values(), "a\u2028b\0\udcff\"x", "0x_ 007 1.2.3.4 aa:bb:cc:dd:ee:ff 16M"]:
        assert "".join(p.text for p in lex(text)) == text


def test_reproducers_are_saved_byte_for_byte(tmp_path: Path):
    from tests.nfp_fuzz import Outcome, _save

    data = b"\xef\xbb\xbfstage s {\r}\xff"
    path = _save(tmp_path, data, "dpdk", "x.nfp", ["noise"], Outcome("crash", "detail", "Boom at x.py:f"))
    assert path.read_bytes() == data and "nfc build" in path.with_suffix(".txt").read_text()


def test_fmt_prints_a_tiny_quantity_that_parses_again():
    """``timeout = 0.00000015s`` was printed ``1.5e-07s``, a syntax error (the fmt oracle)."""
    from lang import Diagnostics
    from lang.parser import parse_text
    from lang.printer import print_module

    src = "state st { key { ip.src: exact; } size = 4; timeout = 0.00000015s; }\n"
    diags = Diagnostics()
    printed = print_module(parse_text(src, "t.nfp", diags))
    again = parse_text(printed, "u.nfp", diags)
    assert not diags.items and "timeout = 0.00000015s;" in printed
    assert again.decls[0].props[-1].value.number == 0.00000015  # type: ignore[union-attr]


def test_the_mutator_survives_a_literal_too_long_for_python_int():
    """A corpus program's 5,000-digit literal once ended a 77-minute campaign: the mutator's
    own int() refused it (ValueError), and the summary, printed at the end, was lost."""
    m = Mutator({"long.nfp": "const A: bit<8> = " + "9" * 5000 + ";\n"}, seed=1)
    made = [m.mutate(i) for i in range(200)]
    assert sum("tweak" in ops for _name, _data, ops in made) > 20  # the mutation that raised was drawn
    tweaked_alone = [data for _name, data, ops in made if ops == ["tweak"]]
    assert tweaked_alone and all(b"9" * 5000 in data for data in tweaked_alone)  # too long to tweak: kept


def test_a_child_that_answers_and_exits_between_two_checks_is_read_not_reported_dead():
    """The parent polled (nothing yet), the child then sent its outcome and exited, and the
    parent saw it dead: once reported as 'signal 0 ... no result' under load."""
    from tests.nfp_fuzz import Outcome, _collect, _Running

    answer = (Outcome("diagnostics", "", ""), 0.1)

    class Child:  # sends and exits the moment the parent has polled once
        sent = False

        def poll(self) -> bool:
            was, Child.sent = Child.sent, True
            return was

        def recv(self) -> tuple[Outcome, float]:
            return answer

        def is_alive(self) -> bool:
            return not Child.sent

        def join(self, timeout: float) -> None:
            pass

    child = Child()
    r = _Running(1, child, child, "", time.monotonic())  # type: ignore[arg-type]
    results = [_collect(r, 10.0), _collect(r, 10.0)]
    assert results == [None, answer]


def _unused_variable(x: object, counter: object, t: object) -> object:
    from targets.c import syntax as c

    return c.Decl("int", "nfc_planted_unused", c.Int(0, ""))  # -Wunused-variable, an error under -Werror


@needs_dpdk
def test_a_server_program_that_does_not_compile_warning_free_is_a_failure(monkeypatch):
    """A build nfc calls good whose nf.c draws a warning from the C compiler (as its Makefile
    builds it) is reported, signed by the compiler's message."""
    import targets.dpdk.lower

    monkeypatch.setattr(targets.dpdk.lower, "_count", _unused_variable)  # the forked child inherits the patch
    outcome = run_one(SMALL.encode(), target="dpdk")
    assert outcome.kind == "c-compile" and "nfc_planted_unused" in outcome.signature, outcome
    monkeypatch.undo()
    assert run_one(SMALL.encode(), target="dpdk").kind == "ok"
