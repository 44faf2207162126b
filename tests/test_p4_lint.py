"""The P4 lint (``targets/p4/lint.py``) and the architecture declarations it checks against
(``targets/p4/intrinsics.py``).

Each check has a small hand-built program that must pass and a mutation of it that must be
rejected with the check's code; the mutations the generators have to be protected from are
also applied to a generated program (vpn_gateway).  Every example is linted for TNA, T2NA
and v1model."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest

from compiler.content_cache import cache_root
from compiler.pipeline import Compilation, compile_program
from lang import Diagnostics, SourceMap, load
from targets.bmv2.arch import V1Model
from targets.p4 import intrinsics as ix
from targets.p4 import syntax as p
from targets.p4.lint import CODES, LintError, lint
from targets.p4.lower import lower_switch
from targets.tofino.arch import TNA
from tests.support import ROOT

EXAMPLES = sorted(e.stem for e in (ROOT / "examples").glob("*.nfp"))
ARCHS = ("tna", "t2na", "v1model")


# ---- helpers -------------------------------------------------------------------------------


def errors(prog: p.Program, arch: str) -> list[LintError]:
    return [e for e in lint(prog, arch) if e.severity == "error"]


def codes(prog: p.Program, arch: str, severity: str = "error") -> set[str]:
    return {e.code for e in lint(prog, arch) if e.severity == severity}


def rewrite(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` bottom-up to every syntax node (and tuple) of ``node``."""
    if isinstance(node, tuple):
        return fn(tuple(rewrite(x, fn) for x in node))
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: rewrite(getattr(node, f.name), fn) for f in dataclasses.fields(node)}
        return fn(dataclasses.replace(node, **changes))
    return node


def walk(node: Any) -> Any:
    """Every syntax node under ``node`` (itself included), depth first."""
    if isinstance(node, tuple):
        for x in node:
            yield from walk(x)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield node
        for f in dataclasses.fields(node):
            yield from walk(getattr(node, f.name))


def replace_state(prog: p.Program, state: str, **changes: Any) -> p.Program:
    """``prog`` with parser state ``state`` changed."""
    return rewrite(prog, lambda n: dataclasses.replace(n, **changes) if isinstance(n, p.State) and n.name == state
                   else n)


def control(prog: p.Program, name: str) -> p.Control:
    return next(d for d in prog.decls if isinstance(d, p.Control) and d.name == name)


def with_decl(prog: p.Program, decl: str, **changes: Any) -> p.Program:
    """``prog`` with top-level declaration ``decl`` changed."""
    return dataclasses.replace(prog, decls=tuple(dataclasses.replace(d, **changes) if d.name == decl else d
                                                 for d in prog.decls))


def call(dotted: str, *args: p.Expr) -> p.CallStmt:
    return p.CallStmt(p.Call(p.ref(dotted), args))


def is_valid(header: str) -> p.Expr:
    return p.Call(p.ref(f"hdr.{header}.isValid"))


# ---- small hand-built programs ---------------------------------------------------------------

B = p.Bits
T = p.TypeName


def _types() -> tuple[p.Decl, ...]:
    return (
        p.ConstDecl(B(8), "PROTO_UDP", p.Const(17, 8)),
        p.HeaderType("eth_h", (("dst", B(48)), ("src", B(48)), ("type", B(16)))),
        p.HeaderType("ip_h", (("ttl", B(8)), ("proto", B(8)), ("csum", B(16)), ("dst", B(32)))),
        p.Struct("headers_t", (("eth", T("eth_h")), ("ip", T("ip_h")))),
        p.Struct("metadata_t", (("seen_ip", B(1)), ("x", B(8)), ("port", B(16)))),
    )


def _states(start_body: tuple[p.Stmt, ...]) -> tuple[p.State, ...]:
    init = tuple(p.Assign(p.ref(f"meta.{f}"), p.Const(0, w)) for f, w in (("seen_ip", 1), ("x", 8), ("port", 16)))
    return (
        p.State("start", (*start_body, *init, call("pkt.extract", p.ref("hdr.eth"))), (p.ref("hdr.eth.type"),),
                (p.Case((p.Const(0x800, 16),), "parse_ip"), p.Case((p.Default(),), "accept"))),
        p.State("parse_ip", (call("pkt.extract", p.ref("hdr.ip")), p.Assign(p.ref("meta.seen_ip"), p.Const(1, 1)))),
    )


def _locals(counter: p.Instance, port_param: p.Type, forward: p.Stmt) -> tuple[p.Instance | p.Action | p.Table, ...]:
    return (
        counter,
        p.Action("fwd", (("port", port_param),), (forward,)),
        p.Action("miss", (), ()),
        p.Table("routes", (p.Key(p.ref("hdr.ip.dst"), "lpm", "dst"),), ("fwd", "miss"), "miss", 16),
    )


def _apply(error_check: p.Expr, drop: p.Stmt, count: p.Stmt) -> tuple[p.Stmt, ...]:
    return (
        p.If(error_check, (drop, p.Exit())),
        p.If(is_valid("ip"), (p.CallStmt(p.Call(p.ref("routes.apply"))),
                              p.Assign(p.ref("hdr.ip.ttl"), p.Bin("-", p.ref("hdr.ip.ttl"), p.Const(1, -1))))),
        p.If(p.Bin("&&", is_valid("ip"), p.Bin("==", p.ref("hdr.ip.proto"), p.Path("PROTO_UDP"))), (count,)),
        p.If(p.Bin("==", p.ref("meta.seen_ip"), p.Const(1, 1)), (p.Assign(p.ref("meta.x"), p.ref("hdr.ip.proto")),)),
        p.Assign(p.ref("meta.x"), p.Bin(">>", p.ref("meta.x"), p.Const(2, -1))),
        p.Assign(p.ref("meta.port"), p.Bin("++", p.ref("meta.x"), p.ref("meta.x"))),
    )


def mini_v1model() -> p.Program:
    hm = (p.Param("inout", T("headers_t"), "hdr"), p.Param("inout", T("metadata_t"), "meta"))
    parser = p.Parser("P", (p.Param("", T("packet_in"), "pkt"), p.Param("out", T("headers_t"), "hdr"),
                            p.Param("inout", T("metadata_t"), "meta"),
                            p.Param("inout", T("standard_metadata_t"), "sm")), (), _states(()))
    counter = p.Instance(T("counter"), (p.Const(16, 32), p.ref("CounterType.packets")), "drops")
    ingress = p.Control("Ig", (*hm, p.Param("inout", T("standard_metadata_t"), "sm")),
                        _locals(counter, B(9), p.Assign(p.ref("sm.egress_spec"), p.Path("port"))),
                        _apply(p.Bin("!=", p.ref("sm.parser_error"), p.ref("error.NoError")),
                               call("mark_to_drop", p.Path("sm")),
                               call("drops.count", p.Cast(B(32), p.ref("meta.x")))))
    checksum = p.Control("Ck", hm, (), (call("update_checksum", is_valid("ip"), p.ListExpr((p.ref("hdr.ip.ttl"),
                                                                                               p.ref("hdr.ip.proto"))),
                                              p.ref("hdr.ip.csum"), p.ref("HashAlgorithm.csum16")),))
    return p.Program(("#include <core.p4>", "#include <v1model.p4>"), (
        *_types(), parser,
        p.Control("Vr", hm, (), ()), ingress,
        p.Control("Eg", (*hm, p.Param("inout", T("standard_metadata_t"), "sm")), (), ()), checksum,
        p.Control("Dp", (p.Param("", T("packet_out"), "pkt"), p.Param("in", T("headers_t"), "hdr")), (),
                  (call("pkt.emit", p.ref("hdr.eth")), call("pkt.emit", p.ref("hdr.ip")))),
        p.Instance(T("V1Switch"), tuple(p.Call(p.Path(n)) for n in ("P", "Vr", "Ig", "Eg", "Ck", "Dp")), "main"),
    ))


def mini_tna(chip: int = 1) -> p.Program:
    arch = TNA(chip)
    parser = p.Parser("IngressParser", arch.parser_params(), (), _states(arch.parser_start()))
    counter = p.Instance(T("Counter", (B(32), B(32))), (p.Const(16, -1), p.ref("CounterType_t.PACKETS")), "drops")
    forward = p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.Cast(T("PortId_t"), p.Slice(p.Path("port"), 8, 0)))
    count = call("drops.count", p.Cast(B(32), p.ref("meta.x")))
    ingress = p.Control("Ingress", arch.ingress_params(), _locals(counter, B(16), forward),
                        _apply(arch.parser_error(), arch.drop()[0], count))
    emit = (call("pkt.emit", p.ref("hdr.eth")), call("pkt.emit", p.ref("hdr.ip")))
    rest = arch.rest("headers_t", "metadata_t", emit, (("ip", (p.ref("hdr.ip.ttl"), p.ref("hdr.ip.proto")),
                                                        p.ref("hdr.ip.csum")),), "IngressParser", "Ingress")
    return p.Program(arch.includes, (*_types(), parser, ingress, *rest))


def mini(arch: str) -> p.Program:
    return mini_v1model() if arch == "v1model" else mini_tna(2 if arch == "t2na" else 1)


def ingress_name(arch: str) -> str:
    return "Ig" if arch == "v1model" else "Ingress"


def prepend(prog: p.Program, arch: str, *stmts: p.Stmt) -> p.Program:
    ig = control(prog, ingress_name(arch))
    return with_decl(prog, ig.name, apply=(*stmts, *ig.apply))


# ---- the small programs pass -----------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_the_small_programs_pass(arch):
    assert lint(mini(arch), arch) == []


def test_the_architecture_must_be_the_included_one():
    assert "P4L002" in codes(mini_tna(), "v1model")
    assert "P4L002" in codes(dataclasses.replace(mini_tna(), preamble=("#include <core.p4>",)), "tna")


# ---- check 1: duplicate declarations -----------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_a_duplicated_table_is_rejected(arch):
    ig = control(mini(arch), ingress_name(arch))
    table = next(x for x in ig.locals if isinstance(x, p.Table))
    found = [e for e in errors(with_decl(mini(arch), ig.name, locals=(*ig.locals, table)), arch) if e.code == "P4L001"]
    assert [(e.name, e.where) for e in found] == [("routes", f"control {ig.name}")]
    assert "must be declared once" in found[0].message


def test_duplicates_in_every_scope_are_rejected():
    prog = mini_v1model()
    const = prog.decls[0]
    assert "P4L001" in codes(dataclasses.replace(prog, decls=(const, *prog.decls)), "v1model")  # top level
    hdr = with_decl(prog, "ip_h", fields=(("ttl", B(8)), ("ttl", B(8))))  # header fields
    assert "P4L001" in codes(hdr, "v1model")
    parser = next(d for d in prog.decls if isinstance(d, p.Parser))
    states = with_decl(prog, "P", states=(*parser.states, p.State("parse_ip", ())))  # parser states
    assert "P4L001" in codes(states, "v1model")
    action = p.Action("twice", (("a", B(8)), ("a", B(8))), ())  # action parameters
    ig = control(prog, "Ig")
    assert "P4L001" in codes(with_decl(prog, "Ig", locals=(*ig.locals, action)), "v1model")
    # a control named like one of v1model's own block types
    assert "P4L001" in codes(with_decl(prog, "Ig", name="Ingress"), "v1model")


# ---- check 2: one apply site per table ---------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_a_table_applied_twice_is_rejected(arch):
    prog = prepend(mini(arch), arch, p.CallStmt(p.Call(p.ref("routes.apply"))))
    found = [e for e in errors(prog, arch) if e.code == "P4L010"]
    assert [e.name for e in found] == ["routes"]
    assert "not at 2" in found[0].message


def test_a_table_applied_in_two_exclusive_branches_is_rejected_too():
    apply = p.CallStmt(p.Call(p.ref("routes.apply")))
    prog = prepend(mini_v1model(), "v1model", p.If(p.Bin("==", p.ref("meta.x"), p.Const(1, 8)), (apply,), (apply,)))
    assert "P4L010" in codes(prog, "v1model")  # bmv2 has one next-table per table (p4lang/p4c#986)


# ---- check 3: shift amounts --------------------------------------------------------------------


def _shift(amount: p.Const) -> p.Stmt:
    return p.Assign(p.ref("meta.port"), p.Bin(">>", p.ref("meta.port"), amount))


def test_a_wide_typed_shift_amount_is_an_error_on_v1model_and_a_warning_on_tna():
    assert "P4L020" in codes(prepend(mini_v1model(), "v1model", _shift(p.Const(16, 32))), "v1model")
    for arch in ("tna", "t2na"):
        prog = prepend(mini(arch), arch, _shift(p.Const(16, 32)))
        assert "P4L020" not in codes(prog, arch)
        assert "P4L020" in codes(prog, arch, "warning")


@pytest.mark.parametrize("arch", ARCHS)
def test_untyped_and_8_bit_shift_amounts_are_accepted(arch):
    assert lint(prepend(mini(arch), arch, _shift(p.Const(4, -1)), _shift(p.Const(15, 8))), arch) == []


def test_a_constant_shift_by_the_full_width_is_a_warning():
    prog = prepend(mini_v1model(), "v1model", _shift(p.Const(16, -1)))
    assert codes(prog, "v1model") == set() and codes(prog, "v1model", "warning") == {"P4L021"}


def test_an_untyped_left_operand_with_a_typed_amount_is_rejected():
    stmt = p.Assign(p.ref("meta.port"), p.Bin("<<", p.Const(1, -1), p.ref("meta.x")))
    assert "P4L021" in codes(prepend(mini_v1model(), "v1model", stmt), "v1model")


# ---- check 4: widths and types -----------------------------------------------------------------


@pytest.mark.parametrize("arch", ("tna", "t2na"))
def test_operands_of_different_widths_are_rejected(arch):
    port = p.Cast(T("PortId_t"), p.Slice(p.ref("meta.port"), 8, 0))
    bad = p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.Bin("+", port, p.Const(1, 48)))
    found = [e for e in errors(prepend(mini(arch), arch, bad), arch) if e.code == "P4L040"]
    assert len(found) == 1 and found[0].message.endswith("must have the same width, not 9 and 48")
    good = p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.Bin("+", port, p.Const(1, -1)))
    assert lint(prepend(mini(arch), arch, good), arch) == []


def test_an_assignment_of_another_width_is_rejected():
    bad = p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.ref("meta.port"))  # bit<16> into PortId_t
    found = [e for e in errors(prepend(mini_tna(), "tna", bad), "tna") if e.code == "P4L041"]
    assert len(found) == 1 and found[0].message.endswith("must be PortId_t (bit<9>), not bit<16>")


TYPE_ERRORS = [
    ("P4L041", p.Assign(p.ref("meta.x"), p.Bin("++", p.ref("meta.x"), p.ref("meta.x")))),  # ++ is 16 bits wide
    ("P4L041", p.Assign(p.ref("meta.seen_ip"), p.Bin("==", p.ref("meta.x"), p.Const(1, 8)))),  # == yields bool
    ("P4L040", p.Assign(p.ref("meta.seen_ip"), p.Cast(B(1), p.Bin("==", p.ref("meta.x"), p.ref("meta.port"))))),
    ("P4L042", p.If(p.ref("meta.x"), ())),
    ("P4L042", p.If(p.Bin("&&", p.ref("meta.seen_ip"), is_valid("ip")), ())),
    ("P4L042", p.If(p.Un("!", p.ref("meta.seen_ip")), ())),
    ("P4L043", p.Assign(p.ref("meta.x"), p.Const(256, 8))),
    ("P4L043", p.Assign(p.ref("meta.x"), p.Bin("+", p.ref("meta.x"), p.Const(300, -1)))),
    ("P4L044", p.Assign(p.ref("meta.x"), p.Slice(p.ref("meta.port"), 16, 9))),
    ("P4L045", p.Assign(p.ref("meta.seen_ip"), p.Cast(B(1), p.Cast(p.Bool(), p.ref("meta.x"))))),
    ("P4L045", p.Assign(p.ref("meta.x"), p.Cast(B(8), p.ref("hdr.eth")))),
    ("P4L030", p.Assign(p.ref("meta.x"), p.Path("NOT_DECLARED"))),
    ("P4L030", p.Assign(p.ref("meta.x"), p.Cast(T("NoSuchType"), p.ref("meta.x")))),
    ("P4L031", p.Assign(p.ref("meta.x"), p.ref("hdr.ip.no_such_field"))),
    ("P4L031", p.CallStmt(p.Call(p.ref("hdr.ip.makeValid")))),
    ("P4L046", call("drops.count")),
    ("P4L047", call("drops.count", p.ref("meta.x"))),  # the index is bit<32>
    ("P4L047", call("mark_to_drop", p.ref("meta"))),
    ("P4L048", p.Assign(p.Path("PROTO_UDP"), p.Const(1, 8))),
]


@pytest.mark.parametrize(("code", "stmt"), TYPE_ERRORS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(TYPE_ERRORS)])
def test_type_errors_are_rejected(code, stmt):
    prog = prepend(mini_v1model(), "v1model", stmt)
    assert code in codes(prog, "v1model"), [str(e) for e in lint(prog, "v1model")]


def test_tna_method_signatures_come_from_the_headers():
    arch = "tna"
    assert "P4L047" in codes(prepend(mini_tna(), arch, call("drops.count", p.ref("meta.x"))), arch)  # I = bit<32>
    ig = control(mini_tna(), "Ingress")
    meter = p.Instance(T("Meter", (B(32),)), (p.Const(4, -1), p.ref("MeterType_t.BYTES")), "m")
    execute = p.Assign(p.ref("meta.x"), p.Call(p.ref("m.execute"), (p.Cast(B(32), p.ref("meta.x")),)))
    ok = with_decl(mini_tna(), "Ingress", locals=(*ig.locals, meter), apply=(execute, *ig.apply))
    assert lint(ok, arch) == []  # Meter<I>.execute returns bit<8>
    wide = with_decl(ok, "Ingress", apply=(p.Assign(p.ref("meta.port"), execute.value), *ig.apply))
    assert "P4L041" in codes(wide, arch)
    hashed = p.Instance(T("Hash", (B(16),)), (p.ref("HashAlgorithm_t.CRC16"),), "h")
    get = p.Assign(p.ref("meta.x"), p.Call(p.ref("h.get"), (p.ListExpr((p.ref("meta.x"),)),)))
    assert "P4L041" in codes(with_decl(mini_tna(), "Ingress", locals=(*ig.locals, hashed), apply=(get,)), arch)


def test_a_write_to_an_in_parameter_is_rejected():
    ig = control(mini_tna(), "Ingress")
    bad = with_decl(mini_tna(), "Ingress", apply=(p.Assign(p.ref("ig_intr_md.ingress_port"), p.Const(1, 9)),
                                                  *ig.apply))
    assert "P4L048" in codes(bad, "tna")


def test_select_keysets_must_match_the_select_expression():
    prog = mini_v1model()
    parser = next(d for d in prog.decls if isinstance(d, p.Parser))
    start = parser.states[0]
    wide = dataclasses.replace(start, cases=(p.Case((p.Const(0x800, 32),), "parse_ip"), *start.cases[1:]))
    assert "P4L049" in codes(with_decl(prog, "P", states=(wide, *parser.states[1:])), "v1model")
    lost = dataclasses.replace(start, cases=(p.Case((p.Const(0x800, 16),), "nowhere"), *start.cases[1:]))
    assert "P4L049" in codes(with_decl(prog, "P", states=(lost, *parser.states[1:])), "v1model")


def test_table_properties_are_checked():
    ig = control(mini_v1model(), "Ig")
    table = next(x for x in ig.locals if isinstance(x, p.Table))
    for bad in (dataclasses.replace(table, default_action="fwd"),  # not parameterless
                dataclasses.replace(table, actions=("fwd", "nope"), default_action="fwd"),
                dataclasses.replace(table, keys=(p.Key(p.ref("hdr.ip.dst"), "atcam_partition_index", "dst"),))):
        prog = with_decl(mini_v1model(), "Ig", locals=tuple(bad if x is table else x for x in ig.locals))
        assert "P4L060" in codes(prog, "v1model")


@pytest.mark.parametrize("arch", ARCHS)
def test_lpm_beside_range_in_one_table_is_rejected_on_tofino(arch):
    ig = control(mini(arch), ingress_name(arch))
    table = next(x for x in ig.locals if isinstance(x, p.Table))
    both = dataclasses.replace(table, keys=(*table.keys, p.Key(p.ref("hdr.ip.proto"), "range", "proto")))
    prog = with_decl(mini(arch), ig.name, locals=tuple(both if x is table else x for x in ig.locals))
    assert ("P4L061" in codes(prog, arch)) == (arch != "v1model")  # bmv2 takes it; p4c-barefoot does not
    assert "P4L061" not in codes(mini(arch), arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_validity_bit_copied_into_a_header_field_is_rejected_on_tofino(arch):
    copy = p.Assign(p.ref("hdr.ip.ttl"), p.Cast(B(8), p.Cast(B(1), is_valid("eth"))))
    guarded = p.If(is_valid("ip"), (copy,))
    found = [e for e in errors(prepend(mini(arch), arch, guarded), arch) if e.code == "P4L083"]
    assert len(found) == (0 if arch == "v1model" else 1)
    # the way nfc writes a bridge's validity flags: constants under the header's isValid()
    consts = p.If(is_valid("ip"), (p.If(is_valid("eth"), (p.Assign(p.ref("hdr.ip.ttl"), p.Const(1, 8)),),
                                        (p.Assign(p.ref("hdr.ip.ttl"), p.Const(0, 8)),)),))
    assert "P4L083" not in codes(prepend(mini(arch), arch, consts), arch)


def test_package_blocks_must_match_the_architecture():
    parser = next(d for d in mini_v1model().decls if isinstance(d, p.Parser))
    meta_out = (parser.params[0], parser.params[1], dataclasses.replace(parser.params[2], direction="out"),
                parser.params[3])
    assert "P4L070" in codes(with_decl(mini_v1model(), "P", params=meta_out), "v1model")
    assert "P4L070" in codes(with_decl(mini_v1model(), "Dp", params=control(mini_v1model(), "Dp").params[:1]),
                             "v1model")
    other_meta = with_decl(mini_v1model(), "Vr", params=(control(mini_v1model(), "Vr").params[0],
                                                         p.Param("inout", T("headers_t"), "meta")))
    assert "P4L070" in codes(other_meta, "v1model")


# ---- check 5: reads of possibly invalid headers ------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_an_unguarded_header_read_is_rejected(arch):
    read = p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl"))
    found = [e for e in errors(prepend(mini(arch), arch, read), arch) if e.code == "P4L050"]
    assert [(e.name, e.where) for e in found] == [("hdr.ip", f"control {ingress_name(arch)} › apply")]
    assert "must be valid where hdr.ip.ttl is read" in found[0].message
    assert "start → accept" in found[0].message  # a parser path that skips the ip header


# guards that contain the read, then guards after which a read follows
READS_THAT_ARE_GUARDED = [
    p.If(is_valid("ip"), (p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl")),)),
    p.If(p.Un("!", is_valid("ip")), (), (p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl")),)),
    p.If(p.Bin("&&", is_valid("ip"), p.Bin("==", p.ref("hdr.ip.ttl"), p.Const(0, 8))), ()),
    p.If(p.Bin("||", p.Un("!", is_valid("ip")), p.Bin("==", p.ref("hdr.ip.ttl"), p.Const(0, 8))), ()),
    p.If(p.Bin("==", p.ref("meta.seen_ip"), p.Const(1, 1)), (p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl")),)),
    p.If(p.Bin("!=", p.ref("meta.seen_ip"), p.Const(0, 1)), (p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl")),)),
    p.If(p.Bin("==", p.ref("meta.seen_ip"), p.Const(0, 1)), (p.Exit(),)),
    p.If(p.Un("!", is_valid("ip")), (call("hdr.ip.setValid"),)),
]


@pytest.mark.parametrize("guard", range(len(READS_THAT_ARE_GUARDED)))
def test_guarded_reads_are_accepted(guard):
    read = p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl"))
    stmts = (READS_THAT_ARE_GUARDED[guard], read) if guard >= 6 else (READS_THAT_ARE_GUARDED[guard],)
    assert lint(prepend(mini_v1model(), "v1model", *stmts), "v1model") == []


def test_validity_follows_set_invalid_and_actions():
    read = p.Assign(p.ref("meta.x"), p.ref("hdr.ip.ttl"))
    prog = prepend(mini_v1model(), "v1model", p.If(is_valid("ip"), (call("hdr.ip.setInvalid"), read)))
    assert "P4L050" in codes(prog, "v1model")
    ig = control(mini_v1model(), "Ig")
    reader = p.Action("peek", (), (read,))
    prog = with_decl(mini_v1model(), "Ig", locals=(*ig.locals, reader), apply=(call("peek"), *ig.apply))
    found = [e for e in errors(prog, "v1model") if e.code == "P4L050"]
    assert [e.where for e in found] == ["control Ig › action peek, called from apply"]
    keyed = with_decl(mini_v1model(), "Ig", apply=(p.CallStmt(p.Call(p.ref("routes.apply"))),))
    assert [e.where for e in errors(keyed, "v1model")] == ["control Ig › table routes (key), applied at apply"]


def test_a_truncated_packet_reaches_the_ingress_with_a_parser_error():
    ig = control(mini_v1model(), "Ig")
    # the parser always extracts hdr.eth, but the extract fails on a short packet: the ingress
    # still runs, with the parser error set and hdr.eth invalid
    read_eth = p.Assign(p.ref("meta.port"), p.ref("hdr.eth.type"))
    unchecked = with_decl(mini_v1model(), "Ig", apply=(read_eth,))
    found = [e for e in errors(unchecked, "v1model") if e.code == "P4L050"]
    assert len(found) == 1 and "reject (pkt.extract(hdr.eth) fails)" in found[0].message
    checked = with_decl(mini_v1model(), "Ig", apply=(ig.apply[0], read_eth))
    assert lint(checked, "v1model") == []


def test_a_constant_decides_a_branch_blocks_later():
    """The states keep a constant while a later condition may read it (issue 47: the others
    are dropped): meta.seen_ip, set by the parser, copied into meta.x, carried past an
    ``exit`` into the egress, still tells the packets with hdr.ip from those without."""
    copy = p.Assign(p.ref("meta.x"), p.Cast(B(8), p.ref("meta.seen_ip")))
    leave = p.If(p.Bin("==", p.ref("meta.x"), p.Const(0, 8)), (p.Exit(),))
    filler = tuple(p.Assign(p.ref("meta.port"), p.Const(k, 16)) for k in range(3))

    def egress_reads_ip_if_x_is(value: int) -> p.Program:
        read = p.If(p.Bin("==", p.ref("meta.x"), p.Const(value, 8)),
                    (p.Assign(p.ref("meta.port"), p.Cast(B(16), p.ref("hdr.ip.ttl"))),))
        prog = with_decl(mini_v1model(), "Ig", apply=(copy, *filler, leave, *filler))
        return with_decl(prog, "Eg", apply=(read,))

    assert lint(egress_reads_ip_if_x_is(1), "v1model") == []
    found = errors(egress_reads_ip_if_x_is(0), "v1model")
    assert [(e.code, e.where, e.name) for e in found] == [("P4L050", "control Eg › apply", "hdr.ip")]
    for prog in (egress_reads_ip_if_x_is(1), egress_reads_ip_if_x_is(0)):
        assert lint(prog, "v1model") == lint(prog, "v1model", exact=True)


def test_writes_to_possibly_invalid_headers_are_warnings():
    prog = prepend(mini_v1model(), "v1model", p.Assign(p.ref("hdr.ip.ttl"), p.Const(1, 8)))
    assert codes(prog, "v1model") == set() and codes(prog, "v1model", "warning") == {"P4L051"}


# ---- generated programs ------------------------------------------------------------------------


@functools.cache
def _compiled(example: str, flag: str) -> Compilation:
    diags, sources = Diagnostics(), SourceMap()
    c = compile_program(load(str(ROOT / "examples" / f"{example}.nfp"), diags, sources), flag, diags,
                        cache=cache_root())
    assert c.placement is not None
    return c


@functools.cache
def generated(example: str, arch: str) -> p.Program:
    """The switch program ``nfc build --target tofino[2]+dpdk`` writes, as a syntax tree
    (lowered as targets/tofino/generator.py does)."""
    c = _compiled(example, "tofino2+dpdk" if arch == "t2na" else "tofino+dpdk")
    targets = c.need_targets()
    assert c.placement is not None and targets.switch is not None
    chip = int(targets.switch.resources.get("chip", 1))
    assert chip == (2 if arch == "t2na" else 1)
    target_arch = V1Model() if arch == "v1model" else TNA(chip)
    prog, _ = lower_switch(c.need_program(), c.placement, c.bridges, targets.server_ports, target_arch)
    assert ix.arch_of(prog) == arch
    return prog


def _new(mutated: p.Program, arch: str, baseline: p.Program) -> list[LintError]:
    before = {(e.code, e.where, e.name) for e in errors(baseline, arch)}
    return [e for e in errors(mutated, arch) if (e.code, e.where, e.name) not in before]


def test_mutations_of_a_generated_program_are_caught():
    tna, v1 = generated("vpn_gateway", "tna"), generated("vpn_gateway", "v1model")
    ig = control(tna, "Ingress")
    table = next(x for x in ig.locals if isinstance(x, p.Table))
    # a duplicated table
    found = _new(with_decl(tna, "Ingress", locals=(*ig.locals, table)), "tna", tna)
    assert [(e.code, e.name) for e in found] == [("P4L001", table.name)]
    # a table applied twice
    twice = with_decl(tna, "Ingress", apply=(*ig.apply, p.CallStmt(p.Call(p.ref(f"{table.name}.apply")))))
    found = _new(twice, "tna", tna)
    assert ("P4L010", table.name) in [(e.code, e.name) for e in found]
    assert {e.code for e in found} <= {"P4L010", "P4L050"}  # the new apply site may also read an unguarded key
    # `>> 32w16` in the v1model checksum fold (the shift amount was once typed)
    typed = rewrite(v1, lambda n: p.Bin(">>", n.left, p.Const(16, 32)) if isinstance(n, p.Bin) and n.op == ">>"
                    and n.right == p.Const(16, -1, base=10) else n)
    assert {e.code for e in _new(typed, "v1model", v1)} == {"P4L020"}
    # ig_tm_md.ucast_egress_port = ... + 48w1
    port = p.ref("ig_tm_md.ucast_egress_port")
    plus = rewrite(tna, lambda n: p.Assign(n.target, p.Bin("+", n.value, p.Const(1, 48)))
                   if isinstance(n, p.Assign) and n.target == port else n)
    found = _new(plus, "tna", tna)
    assert {e.code for e in found} == {"P4L040"} and all(e.message.endswith("not 9 and 48") for e in found)
    # an unguarded header read: the verify conditions lose their isValid() guard
    unguarded = rewrite(tna, lambda n: n.right if isinstance(n, p.Bin) and n.op == "&&" and isinstance(n.left, p.Call)
                        and isinstance(n.left.target, p.Member) and n.left.target.field == "isValid" else n)
    found = _new(unguarded, "tna", tna)
    assert found and {e.code for e in found} == {"P4L050"}
    assert {e.name for e in found} == {"hdr.eth", "hdr.ipv4", "hdr.outer_ipv4"}  # eth: the inner VLAN check
    assert all("what the reference semantics does while parsing" in e.where for e in found)


@pytest.mark.parametrize(("example", "arch"), [(e, a) for e in EXAMPLES for a in ARCHS])
def test_generated_programs_pass_the_lint(example, arch):
    assert [str(e) for e in errors(generated(example, arch), arch)] == []


def test_a_read_after_the_server_is_guarded_or_required():
    """Bluebird's IPv6 packets reach vxlan_encap, which reads ipv4.total_len (0 when ipv4 is
    invalid, by the reference semantics): that read goes through a zeroed copy; the VPN
    gateway's packets all carry ipv4, so its bridge back requires the bit and the read is
    direct.  Removing the guard, or the requirement, is a P4L050."""
    bluebird = generated("bluebird_tor", "tna")
    reads = [n for n in walk(bluebird) if isinstance(n, p.If) and n.cond == p.Call(p.ref("hdr.ipv4.isValid"))
             and n.then == (p.Assign(p.ref("meta.nfc_rd_ipv4__total_len"), p.ref("hdr.ipv4.total_len")),)]
    assert reads
    bare = rewrite(bluebird, lambda n: n.then[0] if n in reads else n)
    found = _new(bare, "tna", bluebird)
    assert {(e.code, e.name) for e in found} == {("P4L050", "hdr.ipv4")}
    vpn = generated("vpn_gateway", "tna")
    assert not any(isinstance(n, p.Member) and n.field.startswith("nfc_rd_") for n in walk(vpn))
    parser = next(d for d in vpn.decls if isinstance(d, p.Parser))
    state = next(s for s in parser.states if s.name == "nfc_bridge2")
    assert state.select == (p.ref("hdr.nfc_bridge2.v_eth"), p.ref("hdr.nfc_bridge2.v_ipv4"))
    # the ipv4 bit not required: a clear bit skips the extract
    optional = replace_state(vpn, "nfc_bridge2", next="nfc_bridge2_v0", select=(), cases=())
    skip = (p.Case((p.Const(1, 1),), "nfc_bridge2_x1"), p.Case((p.Default(),), "nfc_bridge2_v2"))
    optional = replace_state(optional, "nfc_bridge2_v1", select=(p.ref("hdr.nfc_bridge2.v_ipv4"),), cases=skip)
    found = _new(optional, "tna", vpn)
    assert found and {e.code for e in found} == {"P4L050"}


# ---- intrinsics.py -----------------------------------------------------------------------------


def test_arch_of_reads_the_include_lines():
    assert ix.arch_of(mini_tna(1)) == "tna"
    assert ix.arch_of(mini_tna(2)) == "t2na"
    assert ix.arch_of(mini_v1model()) == "v1model"
    with pytest.raises(ValueError):
        ix.arch_of(p.Program(("#include <core.p4>",)))


def _bits(t: p.Type, arch: str) -> int:
    t = ix.typedefs(arch).get(t.name, t) if isinstance(t, p.TypeName) else t
    assert isinstance(t, p.Bits), t
    return t.width


@pytest.mark.parametrize("arch", ("tna", "t2na"))
def test_tna_intrinsic_metadata(arch):
    types = ix.types(arch)
    assert {"ingress_intrinsic_metadata_t", "ingress_intrinsic_metadata_from_parser_t",
            "ingress_intrinsic_metadata_for_deparser_t", "ingress_intrinsic_metadata_for_tm_t",
            "egress_intrinsic_metadata_t", "egress_intrinsic_metadata_from_parser_t",
            "egress_intrinsic_metadata_for_deparser_t", "egress_intrinsic_metadata_for_output_port_t"} <= set(types)
    ig = types["ingress_intrinsic_metadata_t"]
    assert isinstance(ig, p.HeaderType)
    assert [n for n, _ in ig.fields] == ["resubmit_flag", "_pad1", "packet_version", "_pad2", "ingress_port",
                                         "ingress_mac_tstamp"]
    assert sum(_bits(t, arch) for _, t in ig.fields) == 64  # what the parser extracts before the port metadata
    eg = types["egress_intrinsic_metadata_t"]
    assert sum(_bits(t, arch) for _, t in eg.fields) % 8 == 0
    assert ix.typedefs(arch)["PortId_t"] == p.Bits(9)
    assert ix.constants(arch)["PORT_METADATA_SIZE"] == (192 if arch == "t2na" else 64)
    assert dict(types["ingress_intrinsic_metadata_from_parser_t"].fields)["parser_err"] == p.Bits(16)
    assert dict(types["ingress_intrinsic_metadata_for_deparser_t"].fields)["drop_ctl"] == p.Bits(3)
    members = ix.enum_members(arch)
    assert (members["MeterColor_t.GREEN"], members["MeterColor_t.YELLOW"], members["MeterColor_t.RED"]) == (0, 1, 3)
    assert {"HashAlgorithm_t.CRC16", "HashAlgorithm_t.CRC32", "CounterType_t.PACKETS",
            "CounterType_t.PACKETS_AND_BYTES", "MeterType_t.BYTES", "error.NoError"} <= set(members)
    count = ix.externs(arch)["Counter"].overloads("count")[0]
    assert count.params[0].type == p.TypeName("I") and count.params[1].optional
    assert ix.externs(arch)["Hash"].overloads("get")[0].returns == p.TypeName("W")
    assert ix.externs(arch)["Checksum"].overloads("verify")[0].returns == p.Bool()
    assert ix.externs(arch)["Checksum"].overloads("update")[0].returns == p.Bits(16)
    assert {s.returns for s in ix.externs(arch)["Meter"].overloads("execute")} == {p.Bits(8)}


def test_tofino2_differs_where_its_headers_do():
    assert ix.typedefs("tna")["QueueId_t"] == p.Bits(5) and ix.typedefs("t2na")["QueueId_t"] == p.Bits(7)
    assert "ghost_intrinsic_metadata_t" in ix.types("t2na") and "ghost_intrinsic_metadata_t" not in ix.types("tna")
    assert "dleft_hash" in ix.match_kinds("t2na") and "dleft_hash" not in ix.match_kinds("tna")


def test_v1model_declarations():
    std = ix.types("v1model")["standard_metadata_t"]
    fields = dict(std.fields)
    assert (fields["ingress_port"], fields["egress_spec"], fields["parser_error"]) == \
        (p.Bits(9), p.Bits(9), p.TypeName("error"))
    assert ix.meter_colours("v1model") == {"GREEN": 0, "YELLOW": 1, "RED": 2}
    members = ix.enum_members("v1model")
    assert {"HashAlgorithm.crc16", "HashAlgorithm.crc32", "HashAlgorithm.csum16", "CounterType.packets",
            "CounterType.packets_and_bytes", "MeterType.bytes", "error.NoError", "error.PacketTooShort"} <= set(members)
    assert members["error.NoError"] == 0
    assert ix.externs("v1model")["counter"].overloads("count")[0].params[0].type == p.Bits(32)
    assert len(ix.functions("v1model")["mark_to_drop"]) == 2
    update = ix.functions("v1model")["update_checksum"][0]
    assert [q.direction for q in update.params] == ["in", "in", "inout", ""]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_intrinsic_type_name_resolves(arch):
    known = set(ix.types(arch)) | set(ix.typedefs(arch)) | {"error"}
    for decl in ix.types(arch).values():
        for _, t in decl.fields:
            assert not isinstance(t, p.TypeName) or t.name in known, (decl.name, t)


def test_every_code_is_documented():
    import targets.p4.lint as module

    assert module.__doc__ is not None
    for code in CODES:
        assert code in module.__doc__


def test_the_generator_refuses_a_program_the_lint_rejects():
    """``nfc build`` runs the lint on both programs: a target-rule error stops the build as an
    internal error, an unguarded read (P4L050) too; a warning is only listed (switch/lint.txt)."""
    from targets.generator import GeneratorError
    from targets.tofino.generator import _reject

    shift = LintError("P4L020", "control NfcIngress › action nfc_fold_ipv4", "meta.s >> 32w16", "x must be y, not z")
    read = LintError("P4L050", "control Ingress › apply: stage s", "hdr.ipv4", "x must be y, not z")
    write = LintError("P4L051", "control Ingress › apply: stage s", "hdr.udp", "x must be y, not z", "warning")
    _reject([("tna.p4", write)], None)
    with pytest.raises(GeneratorError, match="P4L020"):
        _reject([("tna.p4", write), ("v1model.p4", shift)], None)
    with pytest.raises(GeneratorError, match="P4L050"):
        _reject([("tna.p4", read)], None)
