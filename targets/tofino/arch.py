"""TNA specifics, following tna.p4 / tofino1_arch.p4 / tofino1_base.p4 (p4lang/p4c,
backends/tofino/bf-p4c/p4include): the ingress parser extracts
``ingress_intrinsic_metadata_t`` and skips ``PORT_METADATA_SIZE`` first; ``PortId_t`` is
``bit<9>`` on Tofino-1; drops set ``drop_ctl``; ``Hash<W>`` and ``Checksum`` are externs."""

from __future__ import annotations

from collections.abc import Callable

from targets.p4 import syntax as p
from targets.p4.arch import param as _prm

__all__ = ["TNA"]

_HASH = {"crc16": "HashAlgorithm_t.CRC16", "crc32": "HashAlgorithm_t.CRC32"}


class TNA:
    name: str = "tna"
    idle_property: str = "idle_timeout"  # tofino1_arch.p4 / bf-p4c: per-entry hit state, idle-time notifications
    port_type: p.Type = p.TypeName("PortId_t")
    port_width: int = 9
    needs_ingress_checksum: bool = False
    deparser_checksum: bool = True

    def __init__(self, chip: int = 1) -> None:
        self.chip = chip
        arch_header = "#include <t2na.p4>" if chip == 2 else "#include <tna.p4>"
        self.includes: tuple[str, ...] = ("#include <core.p4>", arch_header)

    def parser_params(self) -> tuple[p.Param, ...]:
        return (_prm("", "packet_in", "pkt"), _prm("out", "headers_t", "hdr"), _prm("out", "metadata_t", "meta"),
                _prm("out", "ingress_intrinsic_metadata_t", "ig_intr_md"))

    def parser_start(self) -> tuple[p.Stmt, ...]:
        return (p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref("ig_intr_md"),))),
                p.CallStmt(p.Call(p.ref("pkt.advance"), (p.ref("PORT_METADATA_SIZE"),))))

    def ingress_port(self) -> p.Expr:
        return p.ref("ig_intr_md.ingress_port")

    def std_field(self, name: str) -> p.Expr | None:
        if name == "ingress_port":
            return p.Cast(p.Bits(16), p.ref("ig_intr_md.ingress_port"))
        if name == "timestamp":
            return p.ref("ig_intr_md.ingress_mac_tstamp")
        return None

    def ingress_params(self) -> tuple[p.Param, ...]:
        return (_prm("inout", "headers_t", "hdr"), _prm("inout", "metadata_t", "meta"),
                _prm("in", "ingress_intrinsic_metadata_t", "ig_intr_md"),
                _prm("in", "ingress_intrinsic_metadata_from_parser_t", "ig_prsr_md"),
                _prm("inout", "ingress_intrinsic_metadata_for_deparser_t", "ig_dprsr_md"),
                _prm("inout", "ingress_intrinsic_metadata_for_tm_t", "ig_tm_md"))

    def parser_error(self) -> p.Expr:
        return p.Bin("!=", p.ref("ig_prsr_md.parser_err"), p.Const(0, 16))

    def forward(self, port: p.Expr) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.ref("ig_tm_md.ucast_egress_port"), p.Cast(p.TypeName("PortId_t"), p.Slice(port, 8, 0))),)

    def drop(self) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.ref("ig_dprsr_md.drop_ctl"), p.Const(1, 3)),)

    def hash_instance(self, alg: str, width: int, name: str) -> p.Instance | None:
        return p.Instance(p.TypeName("Hash", (p.Bits(width),)), (p.ref(_HASH[alg]),), name)

    def hash_stmt(self, alg: str, width: int, name: str, target: p.Expr, data: p.ListExpr) -> p.Stmt:
        return p.Assign(target, p.Call(p.ref(f"{name}.get"), (data,)))

    def parser_checksum(self, inst: str, flag: p.Expr) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        unit = f"nfc_csum_{inst}"
        return ((p.Instance(p.TypeName("Checksum"), (), unit),),
                (p.CallStmt(p.Call(p.ref(f"{unit}.add"), (p.ref(f"hdr.{inst}"),))),
                 p.Assign(flag, p.Call(p.ref(f"{unit}.verify")))))

    def counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("Counter", (p.Bits(32), p.Bits(32))),
                          (p.Const(size, -1, base=10), p.ref("CounterType_t.PACKETS")), name)

    def count(self, name: str, index: p.Expr) -> p.Stmt:
        return p.CallStmt(p.Call(p.ref(f"{name}.count"), (p.Cast(p.Bits(32), index),)))

    def user_counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("Counter", (p.Bits(64), p.Bits(32))), (p.Const(size, -1, base=10),
                                                                             p.ref("CounterType_t.PACKETS_AND_BYTES")),
                          name)

    def meter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("Meter", (p.Bits(32),)), (p.Const(size, -1, base=10), p.ref("MeterType_t.BYTES")),
                          name)

    def meter_stmts(self, name: str, index: p.Expr, colour: p.Expr) -> tuple[p.Stmt, ...]:
        # MeterColor_t: GREEN = 0, YELLOW = 1, RED = 3 (tofino1_base.p4); nfc's red is 2
        return (p.Assign(colour, p.Call(p.ref(f"{name}.execute"), (p.Cast(p.Bits(32), index),))),
                p.If(p.Bin("==", colour, p.Const(3, 8)), (p.Assign(colour, p.Const(2, 8)),)))

    def register_instance(self, name: str, width: int, size: int) -> p.Instance:
        return p.Instance(p.TypeName("Register", (p.Bits(width), p.Bits(32))),
                          (p.Const(size, -1, base=10), p.Const(0, width)), name)

    def register_access(self, name: str, width: int, index: p.Expr, old: p.Expr,
                        update: Callable[[p.Expr], tuple[p.Expr | None, p.Expr | None]]
                        ) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        # a RegisterAction: the stateful ALU returns the old cell and writes the new one in one pass
        value = p.Path("value")
        guard, new = update(value)
        body: list[p.Stmt] = [p.Assign(p.Path("rv"), value)]
        if new is not None:
            write = p.Assign(value, new)
            body.append(p.If(guard, (write,)) if guard is not None else write)
        action = f"{name}__access"
        cell = p.Bits(width)
        inst = p.Instance(p.TypeName("RegisterAction", (cell, p.Bits(32), cell)), (p.Path(name),), action,
                          methods=(p.Method("apply", (p.Param("inout", cell, "value"), p.Param("out", cell, "rv")),
                                            tuple(body)),))
        return (inst,), (p.Assign(old, p.Call(p.ref(f"{action}.execute"), (index,))),)

    def rest(self, hdr_type: str, meta_type: str, emit: tuple[p.Stmt, ...],
             csum_updates: tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...],
             parser: str, ingress: str,
             deferred: tuple[tuple[str, p.Expr, tuple[p.Expr, ...], p.Expr, bool], ...] = ()) -> tuple[p.Decl, ...]:
        locals_ = tuple(p.Instance(p.TypeName("Checksum"), (), f"nfc_csum_{inst}") for inst, _, _ in csum_updates)
        locals_ += tuple(p.Instance(p.TypeName("Checksum"), (), name) for name, *_ in deferred)
        updates = tuple(p.If(p.Call(p.ref(f"hdr.{inst}.isValid")),
                             (p.Assign(target, p.Call(p.ref(f"nfc_csum_{inst}.update"), (p.ListExpr(fields),))),))
                        for inst, fields, target in csum_updates)
        updates += tuple(p.If(p.Bin("==", flag, p.Const(1, 1)), (p.Assign(target, p.Call(
            p.ref(f"{name}.update"), (p.ListExpr(words), *((p.Const(1, 0),) if zeros else ())))),))
            for name, flag, words, target, zeros in deferred)
        deparser = p.Control("IngressDeparser", (
            _prm("", "packet_out", "pkt"), _prm("inout", hdr_type, "hdr"), _prm("in", meta_type, "meta"),
            _prm("in", "ingress_intrinsic_metadata_for_deparser_t", "ig_dprsr_md")),
            locals_, updates + emit, "recompute checksums, then emit the valid headers in order")
        eg_parser = p.Parser("EgressParser", (_prm("", "packet_in", "pkt"), _prm("out", "egress_headers_t", "hdr"),
                                              _prm("out", "egress_metadata_t", "meta"),
                                              _prm("out", "egress_intrinsic_metadata_t", "eg_intr_md")), (),
                             (p.State("start", (p.CallStmt(p.Call(p.ref("pkt.extract"), (p.ref("eg_intr_md"),))),),
                                      next="accept"),), "the egress pipeline passes packets through unchanged")
        egress = p.Control("Egress", (_prm("inout", "egress_headers_t", "hdr"),
                                      _prm("inout", "egress_metadata_t", "meta"),
                                      _prm("in", "egress_intrinsic_metadata_t", "eg_intr_md"),
                                      _prm("in", "egress_intrinsic_metadata_from_parser_t", "eg_prsr_md"),
                                      _prm("inout", "egress_intrinsic_metadata_for_deparser_t", "eg_dprsr_md"),
                                      _prm("inout", "egress_intrinsic_metadata_for_output_port_t", "eg_oport_md")), (),
                           ())
        eg_deparser = p.Control("EgressDeparser", (
            _prm("", "packet_out", "pkt"), _prm("inout", "egress_headers_t", "hdr"),
            _prm("in", "egress_metadata_t", "meta"),
            _prm("in", "egress_intrinsic_metadata_for_deparser_t", "eg_dprsr_md")), (),
            (p.CallStmt(p.Call(p.ref("pkt.emit"), (p.ref("hdr"),))),))
        return (
            deparser,
            p.Struct("egress_headers_t", ()),
            p.Struct("egress_metadata_t", ()),
            eg_parser,
            egress,
            eg_deparser,
            p.Instance(p.TypeName("Pipeline"), tuple(p.Call(p.Path(n)) for n in (
                parser, ingress, "IngressDeparser", "EgressParser", "Egress", "EgressDeparser")), "pipe"),
            p.Instance(p.TypeName("Switch"), (p.Path("pipe"),), "main"),
        )
