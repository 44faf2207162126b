"""P4Info of the switch program, for every example and both architectures.

The written ``<arch>.p4info.txtpb`` is read with P4Runtime's own protobuf classes and
checked against two independent sides: ``p4info.proto`` (``P4Ids.Prefix`` for the ID of
every entity kind) and the printed P4 program, which this file reads with its own regular
expressions (header / struct types, controls, tables, actions, extern instances), never
with ``targets.p4.p4info``.  The last tests feed hand-made syntax trees to
``build_p4info`` to show that what P4Runtime cannot address is rejected, not emitted.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from targets.p4 import syntax as p
from targets.p4.p4info import PREFIX, P4InfoError, build_p4info, one_at_a_time
from tests.support import ROOT, compile_ir, nfc_cli

EXAMPLES = sorted(e.stem for e in (ROOT / "examples").glob("*.nfp"))
ARCHS = ("tna", "v1model")
P4IDS = p4info_pb2.P4Ids

# a program of this file's own: a user counter and a meter on the switch
USER_COUNTERS = """import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; udp: udp; }
metadata { a: bit<8>; }
parser p { state start { extract eth; transition select(eth.ethertype) { 0x0800: v4; default: accept; } }
           state v4 { extract ip; transition select(ip.protocol) { 17: u; default: accept; } }
           state u { extract udp; transition accept; } }
counter hits[1K];
meter limit[16];
stage s1 { hits.count(bit<32>(udp.dport[3:0])); meta.a = bit<8>(limit.execute(2)); forward(1); }
pipeline main { ports = [0..7]; parser = p; stages = [s1]; }
"""
PROGRAMS = [*EXAMPLES, "user_counters"]

# P4Info repeated field → the P4Ids prefix its entities' IDs carry (p4info.proto)
KIND_OF_FIELD = {
    "tables": P4IDS.TABLE, "actions": P4IDS.ACTION, "action_profiles": P4IDS.ACTION_PROFILE,
    "counters": P4IDS.COUNTER, "direct_counters": P4IDS.DIRECT_COUNTER, "meters": P4IDS.METER,
    "direct_meters": P4IDS.DIRECT_METER, "controller_packet_metadata": P4IDS.CONTROLLER_HEADER,
    "value_sets": P4IDS.VALUE_SET, "registers": P4IDS.REGISTER, "digests": P4IDS.DIGEST,
}
HAS_INITIAL_DEFAULT = "initial_default_action" in p4info_pb2.Table.DESCRIPTOR.fields_by_name
Builds = dict[str, Path]  # program → its build folder


# ---- building -------------------------------------------------------------------------------------


def _nfc_build(src: Path, out: Path, target: str) -> None:
    """``nfc build SRC --target TARGET -o OUT --no-verify``; the switch artifacts must be written
    (the DPDK generator does not cover every example yet: its E100 is the only error allowed)."""
    name = src.relative_to(ROOT) if src.is_relative_to(ROOT) else src  # as the other tests name it
    r = nfc_cli("build", str(name), "--target", target, "-o", str(out),
                        "--no-verify")
    errors = [line for line in r.stderr.splitlines() if "error[" in line]
    assert all("error[E100]: the dpdk generator" in line for line in errors), r.stderr
    assert (out / "switch" / "name_map.json").is_file(), r.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    out = {}
    for name in EXAMPLES:
        out[name] = tmp_path_factory.mktemp(name)
        _nfc_build(ROOT / "examples" / f"{name}.nfp", out[name], "tofino+dpdk")
    src = tmp_path_factory.mktemp("src") / "user_counters.nfp"
    src.write_text(USER_COUNTERS)
    out["user_counters"] = tmp_path_factory.mktemp("user_counters")
    _nfc_build(src, out["user_counters"], "tofino")
    return out


@dataclass
class Built:
    info: Any  # p4info_pb2.P4Info
    p4: Printed
    names: dict[str, Any]


def load(built: Builds, program: str, arch: str) -> Built:
    folder = built[program] / "switch"
    info = text_format.Parse((folder / f"{arch}.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    names = json.loads((folder / "name_map.json").read_text())[arch]["p4runtime"]
    return Built(info, Printed((folder / f"{arch}.p4").read_text()), names)


# ---- the printed P4, read independently of targets/p4/p4info.py ------------------------------------

_RECORD = re.compile(r"^((?:@[^\n]*\n)*)(header|struct) (\w+) \{\n(.*?)^\}", re.M | re.S)
_FIELD = re.compile(r"^\s+(.+?) (\w+);$", re.M)
_TYPEDEF = re.compile(r"^typedef (.+?) (\w+);$", re.M)
_CONTROL = re.compile(r"^control (\w+)\(\n(.*?)\n\) \{\n(.*?)^\}", re.M | re.S)
_PARAM = re.compile(r"^\s+(?:(?:in|out|inout) )?(\S+) (\w+),?$", re.M)
# a table or action annotated @hidden is not the control plane's: p4c leaves it out of P4Info
_TABLE = re.compile(r"^((?:    @\w+\n)*)    table (\w+) \{\n(.*?)^    \}", re.M | re.S)
_KEY = re.compile(r"^\s+(.+?) : (\w+) @name\(\"(\w+)\"\);$", re.M)
_ACTION = re.compile(r"^((?:    @\w+\n)*)    action (\w+)\((.*?)\) \{", re.M)
_INSTANCE = re.compile(r"^    (\w+)(?:<.*>)?\((.*)\) (\w+);$", re.M)
_COUNTERLIKE = {"counter": "counter", "Counter": "counter", "meter": "meter", "Meter": "meter",
                "direct_counter": "direct_counter", "DirectCounter": "direct_counter",
                "direct_meter": "direct_meter", "DirectMeter": "direct_meter"}
_UNIT = re.compile(r"\b(?:CounterType|CounterType_t|MeterType|MeterType_t)\.(\w+)")
_BITS = re.compile(r"bit<(\d+)>")


def _width_of_type(t: str, typedefs: dict[str, str]) -> int:
    while t in typedefs:
        t = typedefs[t]
    if t == "bool":
        return 1
    m = _BITS.fullmatch(t)
    assert m, f"not a bit<W> type: {t}"
    return int(m.group(1))


@dataclass
class PTable:
    keys: list[tuple[str, str, str]]  # (expression, match kind, @name)
    actions: list[str]
    default: str
    const_default: bool
    size: int


@dataclass
class PControl:
    params: dict[str, str]  # name → type
    tables: dict[str, PTable] = field(default_factory=dict)
    actions: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # name → [(param, width)]
    externs: dict[str, tuple[str, str, int | None]] = field(default_factory=dict)  # name → (kind, unit, size)


class Printed:
    def __init__(self, text: str) -> None:
        self.text = text
        self.typedefs = dict((n, t) for t, n in _TYPEDEF.findall(text))
        self.records: dict[str, list[tuple[str, str]]] = {}
        self.controller_headers: dict[str, list[tuple[str, int]]] = {}
        for notes, _kind, name, body in _RECORD.findall(text):
            self.records[name] = [(n, t) for t, n in _FIELD.findall(body)]
            for m in re.finditer(r'@controller_header\("(\w+)"\)', notes):
                self.controller_headers[m.group(1)] = [(n, _width_of_type(t, self.typedefs))
                                                       for n, t in self.records[name]]
        self.controls: dict[str, PControl] = {}
        for name, params, body in _CONTROL.findall(text):
            c = PControl({n: t for t, n in _PARAM.findall(params)})
            for notes, tname, tbody in _TABLE.findall(body):
                if "@hidden" in notes:
                    continue
                acts = re.search(r"actions = \{(.*?)\}", tbody, re.S)
                default = re.search(r"^\s+(const )?default_action = (\w+)\(\);$", tbody, re.M)
                size = re.search(r"^\s+size = (\d+);$", tbody, re.M)
                assert acts and default and size, tbody
                c.tables[tname] = PTable(_KEY.findall(tbody), re.findall(r"(\w+);", acts.group(1)),
                                         default.group(2), bool(default.group(1)), int(size.group(1)))
            for notes, aname, aparams in _ACTION.findall(body):
                if "@hidden" in notes:
                    continue
                c.actions[aname] = [(n, _width_of_type(t, self.typedefs))
                                    for t, n in (prm.rsplit(" ", 1) for prm in aparams.split(", ") if prm)]
            for type_name, args, iname in _INSTANCE.findall(body):
                if type_name in _COUNTERLIKE:
                    unit = _UNIT.search(args)
                    assert unit, args
                    kind = _COUNTERLIKE[type_name]
                    first = args.split(",")[0].strip()  # the size, a literal such as 32w256 or 256
                    count = None if kind.startswith("direct_") else int(first.split("w")[-1], 0)
                    c.externs[iname] = (kind, unit.group(1).lower(), count)
            self.controls[name] = c

    def expr_width(self, expr: str, control: PControl) -> int:
        """The width of a key expression as the printed types declare it."""
        cast = re.fullmatch(r"\((bit<\d+>)\).+", expr)
        if cast:
            return _width_of_type(cast.group(1), self.typedefs)
        sliced = re.fullmatch(r".+\[(\d+):(\d+)\]", expr)
        if sliced:
            return int(sliced.group(1)) - int(sliced.group(2)) + 1
        first, *rest = expr.split(".")
        t = control.params[first]
        for name in rest:
            t = dict(self.records[t])[name]
        return _width_of_type(t, self.typedefs)


# ---- checks over one P4Info (they return problems, so the tests can show they catch some) ----------


def id_problems(info: Any) -> list[str]:
    problems: list[str] = []
    seen: dict[int, str] = {}
    for fname, prefix in KIND_OF_FIELD.items():
        for entity in getattr(info, fname):
            ident, name = entity.preamble.id, entity.preamble.name
            if ident >> 24 != prefix:
                problems.append(f"{fname} {name}: id {ident:#010x} has prefix {ident >> 24:#04x}, not {prefix:#04x}")
            if ident in seen:
                problems.append(f"{fname} {name}: id {ident:#010x} is also {seen[ident]}'s")
            seen[ident] = name
    for ext in info.externs:
        for inst in ext.instances:
            if inst.preamble.id >> 24 != ext.extern_type_id or inst.preamble.id in seen:
                problems.append(f"extern {inst.preamble.name}: id {inst.preamble.id:#010x}")
            seen[inst.preamble.id] = inst.preamble.name
    return problems


def table_problems(info: Any, p4: Printed) -> list[str]:
    problems = []
    action_ids = {a.preamble.id: a for a in info.actions}
    action_id = {a.preamble.name: a.preamble.id for a in info.actions}
    for fname in ("tables", "actions"):
        names = [e.preamble.name for e in getattr(info, fname)]
        problems += [f"{fname}: {n} appears {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1]
    printed_tables = {f"{c}.{t}": (ctl, pt) for c, ctl in p4.controls.items() for t, pt in ctl.tables.items()}
    # p4c drops the actions nothing uses (RemoveUnusedDeclarations): a table's or called ("a();")
    printed_actions = {f"{c}.{a}": prm for c, ctl in p4.controls.items() for a, prm in ctl.actions.items()
                       if any(a in pt.actions for pt in ctl.tables.values())
                       or re.search(rf"^\s+{a}\(\);$", p4.text, re.MULTILINE)}
    if {t.preamble.name for t in info.tables} != set(printed_tables):
        problems.append(f"tables {sorted(t.preamble.name for t in info.tables)} != printed {sorted(printed_tables)}")
    if {a.preamble.name for a in info.actions} != set(printed_actions):
        problems.append(f"actions {sorted(a.preamble.name for a in info.actions)} != printed {sorted(printed_actions)}")
    for a in info.actions:
        expected = printed_actions.get(a.preamble.name)
        got = [(prm.id, prm.name, prm.bitwidth) for prm in a.params]
        if expected is not None and got != [(i, n, w) for i, (n, w) in enumerate(expected, 1)]:
            problems.append(f"action {a.preamble.name}: params {got} != printed {expected}")
    for t in info.tables:
        tname = t.preamble.name
        refs = [r.id for r in t.action_refs]
        if len(refs) != len(set(refs)) or not set(refs) <= set(action_ids):
            problems.append(f"table {tname}: action_refs {refs} repeat or do not resolve")
        if tname not in printed_tables:
            continue
        ctl_name = tname.rsplit(".", 1)[0]
        _ctl, pt = printed_tables[tname]
        if refs != [action_id.get(f"{ctl_name}.{a}") for a in pt.actions]:
            problems.append(f"table {tname}: action_refs {refs} are not the printed actions {pt.actions}")
        default = action_id.get(f"{ctl_name}.{pt.default}")
        if (t.const_default_action_id or None) != (default if pt.const_default else None):
            problems.append(f"table {tname}: const_default_action_id {t.const_default_action_id}, printed "
                            f"{'const ' if pt.const_default else ''}default {pt.default}")
        if HAS_INITIAL_DEFAULT and (not t.HasField("initial_default_action")
                                    or t.initial_default_action.action_id != default
                                    or t.initial_default_action.action_id not in action_ids):
            problems.append(f"table {tname}: initial_default_action is not the printed default {pt.default}")
        if t.size != pt.size:
            problems.append(f"table {tname}: size {t.size} != printed {pt.size}")
    return problems


def match_field_problems(info: Any, p4: Printed) -> list[str]:
    problems = []
    for t in info.tables:
        ctl_name, tname = t.preamble.name.rsplit(".", 1)
        ctl = p4.controls[ctl_name]
        expected = [(i, name, p4.expr_width(expr, ctl), match.upper())
                    for i, (expr, match, name) in enumerate(ctl.tables[tname].keys, 1)]
        got = [(m.id, m.name, m.bitwidth, p4info_pb2.MatchField.MatchType.Name(m.match_type)) for m in t.match_fields]
        if got != expected:
            problems.append(f"table {t.preamble.name}: match fields {got} != printed {expected}")
    return problems


def extern_problems(info: Any, p4: Printed) -> list[str]:
    printed = {f"{c}.{n}": x for c, ctl in p4.controls.items() for n, x in ctl.externs.items()}
    units = {"packets": "PACKETS", "bytes": "BYTES", "packets_and_bytes": "BOTH"}
    expected = {name: (kind, units[unit], size) for name, (kind, unit, size) in printed.items()}
    got = {c.preamble.name: ("counter", p4info_pb2.CounterSpec.Unit.Name(c.spec.unit), c.size) for c in info.counters}
    got |= {m.preamble.name: ("meter", p4info_pb2.MeterSpec.Unit.Name(m.spec.unit), m.size) for m in info.meters}
    got |= {c.preamble.name: ("direct_counter", p4info_pb2.CounterSpec.Unit.Name(c.spec.unit), None)
            for c in info.direct_counters}
    got |= {m.preamble.name: ("direct_meter", p4info_pb2.MeterSpec.Unit.Name(m.spec.unit), None)
            for m in info.direct_meters}
    n = len(info.counters) + len(info.meters) + len(info.direct_counters) + len(info.direct_meters)
    problems = [f"{n - len(got)} counter / meter names repeat"] if n != len(got) else []
    if got != expected:
        problems.append(f"counters and meters {got} != printed {expected}")
    return problems


def packet_io_problems(info: Any, p4: Printed) -> list[str]:
    problems = []
    got = {}
    for cpm in info.controller_packet_metadata:
        if cpm.preamble.id >> 24 != P4IDS.CONTROLLER_HEADER:
            problems.append(f"controller header {cpm.preamble.name}: id {cpm.preamble.id:#010x}")
        got[cpm.preamble.name] = [(md.id, md.name, md.bitwidth) for md in cpm.metadata]
    expected = {name: [(i, n, w) for i, (n, w) in enumerate(fields, 1)]
                for name, fields in p4.controller_headers.items()}
    if got != expected or len(got) != len(info.controller_packet_metadata):
        problems.append(f"controller_packet_metadata {got} != printed {expected}")
    return problems


# ---- the tests --------------------------------------------------------------------------------------


def test_prefixes_are_p4info_protos() -> None:
    assert {k: P4IDS.Prefix.Value(k.upper()) for k in PREFIX} == PREFIX
    assert (P4IDS.ACTION, P4IDS.TABLE, P4IDS.VALUE_SET, P4IDS.CONTROLLER_HEADER, P4IDS.PSA_EXTERNS_START,
            P4IDS.ACTION_PROFILE, P4IDS.COUNTER, P4IDS.DIRECT_COUNTER, P4IDS.METER, P4IDS.DIRECT_METER,
            P4IDS.REGISTER, P4IDS.DIGEST) == (0x01, 0x02, 0x03, 0x04, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_every_id_has_its_kinds_prefix_and_ids_are_unique(built: Builds, program: str, arch: str) -> None:
    b = load(built, program, arch)
    assert b.info.pkg_info.arch == arch
    assert id_problems(b.info) == []
    # the name map hands the same IDs to the runtime and the switch model
    assert {t: v["id"] for t, v in b.names["tables"].items()} == \
        {t.preamble.alias: t.preamble.id for t in b.info.tables}
    assert {a: v["id"] for a, v in b.names["actions"].items()} == \
        {a.preamble.alias: a.preamble.id for a in b.info.actions}
    assert b.names["counters"]["nfc_drops"]["id"] == \
        next(c.preamble.id for c in b.info.counters if c.preamble.alias == "nfc_drops")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_one_entry_per_table_and_action_and_every_reference_resolves(built: Builds, program: str, arch: str) -> None:
    b = load(built, program, arch)
    assert b.info.tables or program == "user_counters"
    assert table_problems(b.info, b.p4) == []


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_match_field_widths_are_the_declared_widths_of_the_keys(built: Builds, program: str, arch: str) -> None:
    b = load(built, program, arch)
    assert match_field_problems(b.info, b.p4) == []


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_controller_packet_metadata_is_the_annotated_headers(built: Builds, program: str, arch: str) -> None:
    b = load(built, program, arch)
    assert set(b.p4.controller_headers) == {"packet_in", "packet_out"}
    assert packet_io_problems(b.info, b.p4) == []


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_counters_and_meters_are_the_instances_in_the_program(built: Builds, program: str, arch: str) -> None:
    b = load(built, program, arch)
    assert extern_problems(b.info, b.p4) == []


@pytest.mark.parametrize("arch", ARCHS)
def test_ipsec_gateway_has_its_meters(built: Builds, arch: str) -> None:
    b = load(built, "ipsec_gateway", arch)
    src = compile_ir(str(ROOT / "examples" / "ipsec_gateway.nfp"))
    meters = {n: c.size for n, c in src.counters.items() if c.kind == "meter"}
    assert set(meters) == {"tunnel_in_rate", "tunnel_out_rate"}
    ingress = "Ingress" if arch == "tna" else "NfcIngress"
    assert {(m.preamble.name, p4info_pb2.MeterSpec.Unit.Name(m.spec.unit), m.size) for m in b.info.meters} == \
        {(f"{ingress}.{n}", "BYTES", size) for n, size in meters.items()}
    assert {n: (v["unit"], v["size"]) for n, v in b.names["meters"].items()} == \
        {n: ("BYTES", size) for n, size in meters.items()}


@pytest.mark.parametrize("arch", ARCHS)
def test_user_counters_count_packets_and_bytes(built: Builds, arch: str) -> None:
    b = load(built, "user_counters", arch)
    ingress = "Ingress" if arch == "tna" else "NfcIngress"
    counters = {c.preamble.name: (p4info_pb2.CounterSpec.Unit.Name(c.spec.unit), c.size) for c in b.info.counters}
    assert counters == {f"{ingress}.nfc_drops": ("PACKETS", 256), f"{ingress}.hits": ("BOTH", 1000)}
    assert [(m.preamble.name, m.size) for m in b.info.meters] == [(f"{ingress}.limit", 16)]
    assert {n: (v["unit"], v["size"]) for n, v in b.names["counters"].items()} == \
        {"nfc_drops": ("PACKETS", 256), "hits": ("BOTH", 1000)}


# ---- the checks catch what they are for ---------------------------------------------------------------


def test_the_checks_catch_corrupted_p4info(built: Builds) -> None:
    b = load(built, "ipsec_gateway", "v1model")
    cases: list[tuple[Callable[[Any], object], Callable[[Any], list[str]]]] = [
        (lambda i: setattr(i.controller_packet_metadata[0].preamble, "id", 0x40 << 24 | 5), id_problems),
        (lambda i: i.tables.add().CopyFrom(i.tables[0]), id_problems),
        (lambda i: i.tables.add().CopyFrom(i.tables[0]), lambda i: table_problems(i, b.p4)),
        (lambda i: i.actions.add().CopyFrom(i.actions[0]), lambda i: table_problems(i, b.p4)),
        (lambda i: i.tables[0].action_refs.add(id=P4IDS.ACTION << 24 | 1), lambda i: table_problems(i, b.p4)),
        (lambda i: i.tables[0].ClearField("initial_default_action"), lambda i: table_problems(i, b.p4)),
        (lambda i: i.tables[0].ClearField("const_default_action_id"), lambda i: table_problems(i, b.p4)),
        (lambda i: setattr(i.tables[0].match_fields[0], "bitwidth", 31), lambda i: match_field_problems(i, b.p4)),
        (lambda i: setattr(i.meters[0], "size", 1), lambda i: extern_problems(i, b.p4)),
        (lambda i: i.meters.__delitem__(-1), lambda i: extern_problems(i, b.p4)),
        (lambda i: setattr(i.meters[0].spec, "unit", p4info_pb2.MeterSpec.PACKETS), lambda i: extern_problems(i, b.p4)),
        (lambda i: setattr(i.controller_packet_metadata[0].metadata[0], "bitwidth", 9),
         lambda i: packet_io_problems(i, b.p4)),
    ]
    for corrupt, check in cases:
        info = p4info_pb2.P4Info()
        info.CopyFrom(b.info)
        assert check(info) == []
        corrupt(info)
        assert check(info) != []


# ---- hand-made syntax trees ---------------------------------------------------------------------------


def _tree(*locals_: p.Instance | p.Action | p.Table, headers: tuple[p.HeaderType, ...] = (),
          more: tuple[p.Control, ...] = ()) -> p.Program:
    hdr = p.HeaderType("h_t", (("k", p.Bits(12)), ("flag", p.Bool())))
    return p.Program((), (*headers, hdr, p.Struct("headers_t", (("h", p.TypeName("h_t")),)),
                          p.Control("Ing", (p.Param("inout", p.TypeName("headers_t"), "hdr"),), locals_, ()), *more))


MISS = p.Action("miss", (), ())
SET = p.Action("set", (("v", p.Bits(7)),), ())


def _table(name: str = "t", actions: tuple[str, ...] = ("set", "miss"), default: str = "miss",
           const: bool = True) -> p.Table:
    return p.Table(name, (p.Key(p.ref("hdr.h.k"), "exact", "k"), p.Key(p.ref("hdr.h.flag"), "ternary", "flag")),
                   actions, default, 64, const_default=const)


def test_a_tree_is_described_as_p4c_would() -> None:
    cpu = p.HeaderType("cpu_h", (("port", p.Bits(9)), ("why", p.Bits(7))), annotations=(
        p.Annotation("controller_header", "packet_in"),))
    other = p.Control("Eg", (), (p.Action("t", (), ()),), (p.CallStmt(p.Call(p.Path("t"))),))
    prog = _tree(SET, MISS, _table(const=False),
                 p.Instance(p.TypeName("counter"), (p.Const(8, 32), p.ref("CounterType.bytes")), "c"),
                 p.Instance(p.TypeName("Meter", (p.Bits(32),)), (p.Const(4, -1), p.ref("MeterType_t.PACKETS")), "m"),
                 headers=(cpu,), more=(other,))
    info, names = build_p4info(prog, "v1model")  # key widths from the tree's types
    assert id_problems(info) == []
    t = info.tables[0]
    assert (t.preamble.name, t.size) == ("Ing.t", 64)
    assert [(m.id, m.name, m.bitwidth) for m in t.match_fields] == [(1, "k", 12), (2, "flag", 1)]
    ids = {a.preamble.name: a.preamble.id for a in info.actions}
    # aliases are the shortest suffixes unique among all names: "t" is a table and an action
    assert {a.preamble.name: a.preamble.alias for a in info.actions} == \
        {"Ing.set": "set", "Ing.miss": "miss", "Eg.t": "Eg.t"}
    assert (t.preamble.name, t.preamble.alias) == ("Ing.t", "Ing.t")
    assert [r.id for r in t.action_refs] == [ids["Ing.set"], ids["Ing.miss"]]
    assert t.const_default_action_id == 0  # not const
    assert t.initial_default_action.action_id == ids["Ing.miss"]
    assert [(p_.id, p_.name, p_.bitwidth) for p_ in info.actions[0].params] == [(1, "v", 7)]
    assert [(c.preamble.name, c.spec.unit, c.size) for c in info.counters] == [
        ("Ing.c", p4info_pb2.CounterSpec.BYTES, 8)]
    assert [(m.preamble.name, m.spec.unit, m.size) for m in info.meters] == [
        ("Ing.m", p4info_pb2.MeterSpec.PACKETS, 4)]
    [cpm] = info.controller_packet_metadata
    assert (cpm.preamble.name, [(md.id, md.name, md.bitwidth) for md in cpm.metadata]) == \
        ("packet_in", [(1, "port", 9), (2, "why", 7)])
    assert list(cpm.preamble.annotations) == ['@controller_header("packet_in")']  # as p4c writes it
    assert names["tables"]["t"]["match_fields"]["flag"] == {"id": 2, "bitwidth": 1, "match": "ternary"}


def test_ids_are_p4cs_one_at_a_time_hashes_probed_in_name_order() -> None:
    """p4c (control-plane/p4RuntimeSymbolTable.cpp) makes an id of the kind's prefix and the low
    24 bits of Jenkins's one-at-a-time hash of the name, walks each kind's names in sorted
    order and takes the next free value on a collision.  The hash's values are Wikipedia's
    ("Jenkins hash function"); "Ing.a3350" and "Ing.a3553" share their low 24 bits, 0xd6740d."""
    assert one_at_a_time(b"a") == 0xCA2E9442
    assert one_at_a_time(b"The quick brown fox jumps over the lazy dog") == 0x519E91F5
    assert one_at_a_time(b"Ing.a3350") & 0xFFFFFF == one_at_a_time(b"Ing.a3553") & 0xFFFFFF == 0xD6740D
    late, early = p.Action("a3553", (), ()), p.Action("a3350", (), ())  # declared out of name order
    info, _names = build_p4info(_tree(late, early, MISS, _table(actions=("a3553", "a3350", "miss"))), "v1model")
    ids = {a.preamble.name: a.preamble.id for a in info.actions}
    assert ids == {"Ing.a3350": 0x01D6740D, "Ing.a3553": 0x01D6740E,
                   "Ing.miss": 0x01000000 | one_at_a_time(b"Ing.miss") & 0xFFFFFF}


def test_an_action_nothing_uses_is_left_out_as_p4c_leaves_it() -> None:
    """p4c's front end removes unused declarations before it writes P4Info: an action is an
    object when a table lists it or a block calls it."""
    called = p.Action("called", (), ())
    prog = _tree(SET, MISS, p.Action("unused", (), ()), called, _table(),
                 more=(p.Control("Eg", (), (p.Action("c2", (), ()),), (p.CallStmt(p.Call(p.Path("c2"))),)),))
    prog = dataclasses.replace(prog, decls=tuple(
        dataclasses.replace(d, apply=(*d.apply, p.CallStmt(p.Call(p.Path("called")))))
        if isinstance(d, p.Control) and d.name == "Ing" else d for d in prog.decls))
    info, _names = build_p4info(prog, "v1model")
    assert sorted(a.preamble.name for a in info.actions) == ["Eg.c2", "Ing.called", "Ing.miss", "Ing.set"]


@pytest.mark.parametrize(("tree", "message"), [
    (lambda: _tree(SET, MISS, _table(), _table()), "table 'Ing.t' is declared more than once"),
    (lambda: _tree(SET, MISS, MISS, _table()), "action 'Ing.miss' is declared more than once"),
    (lambda: _tree(SET, MISS, _table("miss")), "'Ing.miss' names more than one table, action"),
    (lambda: _tree(SET, MISS, _table(), more=(p.Control("Eg", (), (MISS,), ()),)),
     "two controls each declare the action 'miss'"),
    (lambda: _tree(SET, MISS, p.Table("t", (p.Key(p.ref("hdr.h.k"), "exact", "k"),) * 2, ("miss",), "miss", 4)),
     "table 'Ing.t' has two match fields named 'k'"),
    (lambda: _tree(p.Action("a", (("x", p.Bits(1)), ("x", p.Bits(2))), ()), MISS, _table(actions=("a", "miss"))),
     "two parameters named 'x'"),
    (lambda: _tree(MISS, _table()), "lists action 'set'"),
    (lambda: _tree(SET, MISS, _table(actions=("set", "set", "miss"))), "table 'Ing.t' lists action 'set' twice"),
    (lambda: _tree(SET, MISS, _table(default="set")), "default action 'set' has control-plane parameters"),
    (lambda: _tree(SET, MISS, _table(actions=("set",))), "default action 'miss' is not in its actions"),
    (lambda: _tree(p.Instance(p.TypeName("direct_counter"), (p.ref("CounterType.packets"),), "dc")),
     "direct counter 'Ing.dc' is not attached to a table"),
    (lambda: _tree(p.Instance(p.TypeName("counter"), (p.Const(8, 32), p.ref("CounterType.bytes")), "c"),
                   p.Instance(p.TypeName("meter"), (p.Const(8, 32), p.ref("MeterType.bytes")), "c")),
     "'Ing.c' names more than one"),
    (lambda: _tree(p.Instance(p.TypeName("meter"), (p.Const(8, 32),), "m")), "meter 'Ing.m': cannot tell its unit"),
    (lambda: _tree(p.Action("a", (("x", p.TypeName("unknown_t")),), ()), MISS, _table(actions=("a", "miss"))),
     "parameter 'x'"),
    (lambda: _tree(headers=(p.HeaderType("a_h", (("x", p.Bits(8)),), annotations=(
        p.Annotation("controller_header", "packet_in"),)), p.HeaderType("b_h", (("y", p.Bits(8)),), annotations=(
            p.Annotation("controller_header", "packet_in"),)))),
     "controller header 'packet_in' is declared more than once"),
])
def test_what_p4runtime_cannot_address_is_rejected(tree: Callable[[], p.Program], message: str) -> None:
    with pytest.raises(P4InfoError, match=re.escape(message)):
        build_p4info(tree(), "v1model")


def test_key_widths_must_agree_with_the_tree() -> None:
    prog = _tree(SET, MISS, _table())
    info, _ = build_p4info(prog, "v1model", {"t": [12, 1]})
    assert [m.bitwidth for m in info.tables[0].match_fields] == [12, 1]
    with pytest.raises(P4InfoError, match="key field 'k' is 12 bits wide in the P4 program but 16"):
        build_p4info(prog, "v1model", {"t": [16, 1]})
    with pytest.raises(P4InfoError, match="2 key fields but 1 key widths"):
        build_p4info(prog, "v1model", {"t": [12]})
