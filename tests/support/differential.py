"""The differential check shared by the example and corpus tests: random entries and packets
from the fuzzer (tests/fuzz.py), the reference interpreter's outputs, and ``nfc run``'s on a
build, compared packet for packet and drop reason for drop reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from compiler.interp import Entry
from tests.fuzz import Fuzzer
from tests.support import compile_file, entry_json, learn_entries, loaded_spec, nfc_run, reference_outputs

__all__ = ["agree"]

Outputs = tuple[dict[int, Counter[bytes]], Counter[str]]


def _spec(c, tables: dict[str, list[Entry]], inputs: dict[int, list[bytes]]) -> Outputs:
    return reference_outputs(loaded_spec(c, tables), inputs)


def _local_to_shards(label: str, tables: dict[str, list[Entry]]) -> None:
    """A sharded deployment (``shard by``) is the spec when the state a packet changes is its
    shard's alone (docs/runtime.md, "Sharded servers"); random entries would let two GPNs'
    tunnels share a sequence slot or a replay window.  The IPsec gateway's entries give each
    tunnel its own, as its IKE allocates them (seed 001 §4.4: a GPN holds its tunnels' SAs)."""
    if label != "ipsec_gateway":
        return
    tunnel = {e.key[0].value: e.values["tunnel"] for e in tables["spi_steering"]}
    # a slot of its own per tunnel, within sa_seq's 64,000 (the runtime refuses a slot past them)
    tables["outbound_sa"] = [replace(e, values={**e.values, "seq_index": i})
                             for i, e in enumerate(tables["outbound_sa"])]
    tables["inbound_sa"] = [replace(e, values={**e.values, "sa_index": tunnel.get(e.key[0].value, 0)})
                            for e in tables["inbound_sa"]]


def agree(label: str, src, out, tmp_path, packets: int) -> None:
    c = compile_file(str(src))
    fz = Fuzzer(c.program, seed=sum(map(ord, label)))
    tables = {name: fz.entries(t, 16) for name, t in c.program.tables.items() if not t.is_state}
    inputs: dict[int, list[bytes]] = {}
    for _ in range(packets):
        pl = fz.rnd.choice(c.program.pipelines)
        inputs.setdefault(fz.port(pl), []).append(fz.packet(pl))
    learn_entries(c, fz, tables, inputs)
    _local_to_shards(label, tables)
    want = _spec(c, tables, inputs)
    forwarded = sum(sum(n.values()) for n in want[0].values())
    assert forwarded >= 10 and len(want[1]) >= 2, f"the inputs reach too few outcomes: {forwarded}, {want[1]}"
    entries = {name: [entry_json(c, name, e) for e in rows] for name, rows in tables.items()}
    assert nfc_run(out, entries, inputs, tmp_path / "run") == want
