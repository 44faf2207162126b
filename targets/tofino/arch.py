"""TNA specifics, following tna.p4 / tofino1_arch.p4 / tofino1_base.p4 (p4lang/p4c,
backends/tofino/bf-p4c/p4include): the ingress parser extracts
``ingress_intrinsic_metadata_t`` and skips ``PORT_METADATA_SIZE`` first; ``PortId_t`` is
``bit<9>`` on Tofino-1; drops set ``drop_ctl``; ``Hash<W>`` and ``Checksum`` are externs."""

from __future__ import annotations

from targets.p4 import syntax as p

__all__ = ["TNA"]

_HASH = {"crc16": "HashAlgorithm_t.CRC16", "crc32": "HashAlgorithm_t.CRC32"}


class TNA:
    name: str = "tna"
    port_type: str = "PortId_t"
    port_width: int = 9
    needs_ingress_checksum: bool = False

    def __init__(self, chip: int = 1) -> None:
        self.chip = chip
        arch_header = "#include <t2na.p4>" if chip == 2 else "#include <tna.p4>"
        self.includes: tuple[str, ...] = ("#include <core.p4>", arch_header)

    def parser_params(self) -> tuple[str, ...]:
        return ("packet_in pkt", "out headers_t hdr", "out metadata_t meta",
                "out ingress_intrinsic_metadata_t ig_intr_md")

    def parser_start(self) -> tuple[p.Stmt, ...]:
        return (p.CallStmt(p.Call(p.Path("pkt.extract"), (p.Path("ig_intr_md"),))),
                p.CallStmt(p.Call(p.Path("pkt.advance"), (p.Path("PORT_METADATA_SIZE"),))))

    def ingress_port(self) -> p.Expr:
        return p.Path("ig_intr_md.ingress_port")

    def std_field(self, name: str) -> p.Expr | None:
        if name == "ingress_port":
            return p.Cast("bit<16>", p.Path("ig_intr_md.ingress_port"))
        if name == "timestamp":
            return p.Path("ig_intr_md.ingress_mac_tstamp")
        return None

    def ingress_params(self) -> tuple[str, ...]:
        return ("inout headers_t hdr", "inout metadata_t meta", "in ingress_intrinsic_metadata_t ig_intr_md",
                "in ingress_intrinsic_metadata_from_parser_t ig_prsr_md",
                "inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md",
                "inout ingress_intrinsic_metadata_for_tm_t ig_tm_md")

    def parser_error(self) -> p.Expr:
        return p.Bin("!=", p.Path("ig_prsr_md.parser_err"), p.Const(0, 16))

    def forward(self, port: p.Expr) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.Path("ig_tm_md.ucast_egress_port"), p.Cast("PortId_t", p.Slice(port, 8, 0))),)

    def drop(self) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.Path("ig_dprsr_md.drop_ctl"), p.Const(1, 3)),)

    def hash_instance(self, alg: str, width: int, name: str) -> p.Instance | None:
        return p.Instance(f"Hash<bit<{width}>>", (p.Path(_HASH[alg]),), name)

    def hash_stmt(self, alg: str, width: int, name: str, target: p.Expr, data: p.ListExpr) -> p.Stmt:
        return p.Assign(target, p.Call(p.Path(f"{name}.get"), (data,)))

    def parser_checksum(self, inst: str, flag: p.Expr) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        unit = f"nfc_csum_{inst}"
        return ((p.Instance("Checksum", (), unit),),
                (p.CallStmt(p.Call(p.Path(f"{unit}.add"), (p.Path(f"hdr.{inst}"),))),
                 p.Assign(flag, p.Call(p.Path(f"{unit}.verify")))))

    def counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("Counter<bit<32>, bit<32>>", (p.Const(size, -1), p.Path("CounterType_t.PACKETS")), name)

    def count(self, name: str, index: p.Expr) -> p.Stmt:
        return p.CallStmt(p.Call(p.Path(f"{name}.count"), (p.Cast("bit<32>", index),)))

    def user_counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("Counter<bit<64>, bit<32>>", (p.Const(size, -1), p.Path("CounterType_t.PACKETS_AND_BYTES")),
                          name)

    def meter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("Meter<bit<32>>", (p.Const(size, -1), p.Path("MeterType_t.BYTES")), name)

    def meter_stmts(self, name: str, index: p.Expr, colour: p.Expr) -> tuple[p.Stmt, ...]:
        # MeterColor_t: GREEN = 0, YELLOW = 1, RED = 3 (tofino1_base.p4); nfc's red is 2
        return (p.Assign(colour, p.Call(p.Path(f"{name}.execute"), (p.Cast("bit<32>", index),))),
                p.If(p.Bin("==", colour, p.Const(3, 8)), (p.Assign(colour, p.Const(2, 8)),)))

    def rest(self, hdr_type: str, meta_type: str, emit: tuple[p.Stmt, ...],
             csum_updates: tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...],
             parser: str, ingress: str) -> tuple[p.Decl, ...]:
        locals_ = tuple(p.Instance("Checksum", (), f"nfc_csum_{inst}") for inst, _, _ in csum_updates)
        updates = tuple(p.If(p.Call(p.Path(f"hdr.{inst}.isValid")),
                             (p.Assign(target, p.Call(p.Path(f"nfc_csum_{inst}.update"), (p.ListExpr(fields),))),))
                        for inst, fields, target in csum_updates)
        deparser = p.Control("IngressDeparser", ("packet_out pkt", f"inout {hdr_type} hdr", f"in {meta_type} meta",
                                                 "in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md"),
                             locals_, updates + emit, "recompute checksums, then emit the valid headers in order")
        eg_parser = p.Parser("EgressParser", ("packet_in pkt", "out egress_headers_t hdr", "out egress_metadata_t meta",
                                              "out egress_intrinsic_metadata_t eg_intr_md"), (),
                             (p.State("start", (p.CallStmt(p.Call(p.Path("pkt.extract"), (p.Path("eg_intr_md"),))),),
                                      next="accept"),), "the egress pipeline passes packets through unchanged")
        egress = p.Control("Egress", ("inout egress_headers_t hdr", "inout egress_metadata_t meta",
                                      "in egress_intrinsic_metadata_t eg_intr_md",
                                      "in egress_intrinsic_metadata_from_parser_t eg_prsr_md",
                                      "inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md",
                                      "inout egress_intrinsic_metadata_for_output_port_t eg_oport_md"), (), ())
        eg_deparser = p.Control("EgressDeparser", ("packet_out pkt", "inout egress_headers_t hdr",
                                                   "in egress_metadata_t meta",
                                                   "in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md"), (),
                                (p.CallStmt(p.Call(p.Path("pkt.emit"), (p.Path("hdr"),))),))
        return (
            deparser,
            p.Struct("egress_headers_t", ()),
            p.Struct("egress_metadata_t", ()),
            eg_parser,
            egress,
            eg_deparser,
            p.Instance("Pipeline", tuple(p.Path(f"{n}()") for n in (parser, ingress, "IngressDeparser", "EgressParser",
                                                                   "Egress", "EgressDeparser")), "pipe"),
            p.Instance("Switch", (p.Path("pipe"),), "main"),
        )
