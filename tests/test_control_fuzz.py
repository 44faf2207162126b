"""The control-channel fuzzer (tests/control_fuzz.py) as CI runs it: a few sessions of random
well-framed and malformed requests, half-sent frames and interleaved clients against the
server program built with ASan + UBSan while it forwards; and the fuzzer's model of the
protocol against the rules docs/control.md states."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from runtime.control import OP
from tests import control_fuzz as cf
from tests import packet_fuzz as pf
from tests.support import needs_dpdk

SESSIONS = 3 if not os.environ.get("NFC_SLOW") else 20  # of 300 steps each, per program


@pytest.fixture(scope="module", params=["cgnat", "dsr_router"])
def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[pf.Case, cf.Model]:
    """cgnat: LPM tables and data-plane state (READ_ONLY, DUMP through the lcore); dsr_router:
    an exact + LPM key, values packed in the entry and values too wide for that."""
    folder = tmp_path_factory.mktemp(request.param)
    case = pf.build_case(request.param, "dpdk", folder)
    return case, cf.model_of(case, folder / "hello")


@needs_dpdk
def test_control_channel_answers_fuzzed_requests_as_documented_while_forwarding(
        program: tuple[pf.Case, cf.Model], tmp_path: Path) -> None:
    case, model = program
    statuses: set[int] = set()
    for seed in range(SESSIONS):
        outcome = cf.run_session(case, cf.session_steps(model, seed, 300), tmp_path, seed)
        assert outcome.failure is None, f"seed {seed}: {outcome.failure.signature}\n{outcome.failure.detail}"
        statuses |= set(outcome.statuses)
    wanted = {cf.OK, cf.BAD_REQUEST, cf.BAD_OP, cf.NO_TABLE, cf.OUT_OF_RANGE, cf.EXISTS, cf.NOT_FOUND, cf.DUPLICATE}
    if any(t.state for t in model.tables):
        wanted.add(cf.READ_ONLY)
    assert wanted <= statuses, f"no reply with status {sorted(wanted - statuses)}"


@needs_dpdk
def test_a_write_the_model_did_not_expect_is_caught(program: tuple[pf.Case, cf.Model], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle has teeth: a model that forgets what MODIFY does disagrees with the DUMP
    that follows the first OK MODIFY."""
    case, model = program
    apply = cf.apply

    def forgetful(m: cf.Model, data: bytes) -> None:
        if cf.parse_request(data)[0][2] != OP["modify"]:
            apply(m, data)
    monkeypatch.setattr(cf, "apply", forgetful)
    outcome = cf.run_session(case, cf.session_steps(model, 0, 300), tmp_path)
    assert outcome.failure is not None and outcome.failure.signature == \
        "an OK MODIFY left the table other than documented"


@needs_dpdk
@pytest.mark.parametrize("program", ["cgnat"], indirect=True)
def test_hello_names_each_server_table_once(program: tuple[pf.Case, cf.Model]) -> None:
    """A request names a table by its index in HELLO, clients (runtime.control) by its name:
    each table of the program is there once (cgnat's nat_out, looked up and inserted into by
    one stage, was listed twice; found by the control fuzzer)."""
    _case, model = program
    names = [t.name for t in model.tables]
    assert len(names) == len(set(names)), names


# ---- the model against docs/control.md ----------------------------------------------------------

# as HELLO describes them: dsr_router's vrf_fib (an exact VRF of 14 bits, an LPM IPv4
# destination; two values) and a data-plane state table
FIB = {"name": "vrf_fib", "keys": [14, 32], "values": [32, 24], "lpm": 1, "state": False}
STATE = {"name": "flows", "keys": [32], "values": [16], "lpm": -1, "state": True}


def _model(*entries: tuple[int, int, int]) -> cf.Model:
    m = cf.Model([FIB, STATE])
    for vrf, net, plen in entries:
        m.tables[0].entries[(vrf, net, plen)] = (1, 1)
    return m


def _add(*records: list[int]) -> bytes:
    return cf.request(OP["add"], 0, len(records), [w for r in records for w in r])


@pytest.mark.parametrize(("frame", "status", "index"), [
    (_add([3, 0x0A010203, 16, 5, 5]), cf.EXISTS, 0),                     # 10.1.2.3/16 is 10.1.0.0/16, present
    (_add([3, 0x0A020000, 16, 5, 5], [3, 0x0A02FFFF, 16, 5, 5]), cf.DUPLICATE, None),  # one key, twice
    (_add([3, 0x0A020000, 16, 5, 5], [1 << 14, 0, 0, 5, 5]), cf.OUT_OF_RANGE, 1),  # VRF past 14 bits
    (_add([3, 0x0A020000, 33, 5, 5]), cf.OUT_OF_RANGE, 0),                # a prefix longer than its field
    (_add([3, 0x0A020000, 16, 5, 1 << 24]), cf.OUT_OF_RANGE, 0),          # a value past 24 bits
    (_add([3, 0x0A020000, 16, 5, 5], [4, 0, 0, 5, 5]), cf.OK, 2),        # index: records done
    (cf.request(OP["modify"], 0, 1, [4, 0, 0, 1, 1]), cf.NOT_FOUND, 0),
    (cf.request(OP["delete"], 0, 1, [3, 0x0A01FFFF, 16]), cf.OK, 1),
    (cf.request(OP["delete"], 0, 2, [3, 0x0A010000, 16]), cf.BAD_REQUEST, None),   # 2 records, 1 in the body
    (cf.request(OP["read"], 0, 1, [3, 0x0A010000, 16, 0]), cf.BAD_REQUEST, None),  # a record of the wrong width
    (cf.request(OP["add"], 1, 1, [1, 1]), cf.READ_ONLY, None),           # data-plane state
    (cf.request(OP["dump"], 1, 0, [0]), cf.OK, None),
    (cf.request(OP["add"], 2, 1, [1, 1]), cf.NO_TABLE, None),
    (cf.request(42, 0, 0), cf.BAD_OP, None),
    (cf.request(OP["clear"], 0, 0), cf.OK, 1),                           # index: entries deleted
])
def test_model_predicts_the_documented_status(frame: bytes, status: int, index: int | None) -> None:
    want = cf.predict(_model((3, 0x0A010000, 16)), frame)
    assert (want.status, want.closes) == (status, False)
    if index is not None:
        assert want.indices == frozenset({index})
    elif status == cf.DUPLICATE:
        assert want.indices == frozenset({0, 1})


@pytest.mark.parametrize("frame", [
    cf.request(OP["hello"], 0, 0, magic=b"NFCR"),
    cf.request(OP["hello"], 0, 0, version=2),
    cf.request(OP["add"], 0, 1, length=(64 << 20) + 8),  # past NFC_CTL_MAX_BODY
    cf.request(OP["add"], 0, 1, length=12),              # not whole words
])
def test_model_expects_bad_framing_to_close_the_connection(frame: bytes) -> None:
    assert cf.predict(_model(), frame) == cf.Expect(cf.BAD_REQUEST, closes=True)


def test_a_dump_position_no_reply_gives_may_be_refused_and_a_state_dump_may_be_busy() -> None:
    """DUMP positions come from DUMP replies, which give them below 2^32; docs/control.md says
    nothing of a larger one: OK (a page) or OUT_OF_RANGE.  BUSY: a state copy not taken in time."""
    far = cf.predict(_model(), cf.request(OP["dump"], 0, 0, [1 << 40]))
    assert (far.status, far.also) == (cf.OK, frozenset({cf.OUT_OF_RANGE}))
    assert cf.predict(_model(), cf.request(OP["dump"], 0, 0, [5])).also == frozenset()
    assert cf.predict(_model(), cf.request(OP["dump"], 1, 0, [5])).also == frozenset({cf.BUSY})


def test_an_ok_write_changes_the_model_by_its_masked_key() -> None:
    m = _model()
    cf.apply(m, _add([3, 0x0A0102FF, 24, 7, 8]))
    assert m.tables[0].entries == {(3, 0x0A010200, 24): (7, 8)}
    cf.apply(m, cf.request(OP["delete"], 0, 1, [3, 0x0A010201, 24]))
    assert m.tables[0].entries == {}


def test_steps_replay_from_their_json() -> None:
    steps = cf.session_steps(_model(), 7, 100)
    assert [cf.Step.from_json(s.to_json()) for s in steps] == steps
    assert {s.kind for s in steps} == {"single", "partial", "interleaved"}
    for s in steps:
        if s.kind == "interleaved":  # the cuts send every byte of every frame, in pieces
            assert [sum(n for c, n in s.cuts if c == i) for i in range(len(s.frames))] == [len(f) for f in s.frames]


def test_request_framing_is_the_documented_header() -> None:
    """"NFCQ" | version u8 | op u8 | table u16 | count u32 | length u32, little-endian."""
    assert cf.request(OP["read"], 3, 2, [7, 8]) == b"NFCQ\x01\x05\x03\x00\x02\x00\x00\x00\x10\x00\x00\x00" + \
        struct.pack("<2Q", 7, 8)
