"""v1model specifics (p4lang/p4c p4include/v1model.p4): ``standard_metadata_t``,
``mark_to_drop``, ``hash()``, checksums in the VerifyChecksum / ComputeChecksum
controls, and the ``V1Switch`` package."""

from __future__ import annotations

from targets.p4 import syntax as p

__all__ = ["V1Model"]

_HASH = {"crc16": "HashAlgorithm.crc16", "crc32": "HashAlgorithm.crc32"}


class V1Model:
    name: str = "v1model"
    includes: tuple[str, ...] = ("#include <core.p4>", "#include <v1model.p4>")
    port_type: str = "bit<9>"
    port_width: int = 9
    needs_ingress_checksum: bool = True

    def parser_params(self) -> tuple[str, ...]:
        return ("packet_in pkt", "out headers_t hdr", "inout metadata_t meta",
                "inout standard_metadata_t standard_metadata")

    def parser_start(self) -> tuple[p.Stmt, ...]:
        return ()

    def ingress_port(self) -> p.Expr:
        return p.Path("standard_metadata.ingress_port")

    def std_field(self, name: str) -> p.Expr | None:
        if name == "ingress_port":
            return p.Cast("bit<16>", p.Path("standard_metadata.ingress_port"))
        if name == "timestamp":
            return p.Path("standard_metadata.ingress_global_timestamp")
        if name == "packet_length":
            return p.Cast("bit<16>", p.Path("standard_metadata.packet_length"))
        return None

    def ingress_params(self) -> tuple[str, ...]:
        return ("inout headers_t hdr", "inout metadata_t meta", "inout standard_metadata_t standard_metadata")

    def parser_error(self) -> p.Expr:
        return p.Bin("!=", p.Path("standard_metadata.parser_error"), p.Path("error.NoError"))

    def forward(self, port: p.Expr) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.Path("standard_metadata.egress_spec"), p.Cast("bit<9>", p.Slice(port, 8, 0))),)

    def drop(self) -> tuple[p.Stmt, ...]:
        return (p.CallStmt(p.Call(p.Path("mark_to_drop"), (p.Path("standard_metadata"),))),)

    def hash_instance(self, alg: str, width: int, name: str) -> p.Instance | None:
        return None

    def hash_stmt(self, alg: str, width: int, name: str, target: p.Expr, data: p.ListExpr) -> p.Stmt:
        return p.CallStmt(p.Call(p.Path("hash"), (target, p.Path(_HASH[alg]), p.Const(0, width), data,
                                                  p.Const(1 << width, width + 1))))

    def parser_checksum(self, inst: str, flag: p.Expr) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        return (), ()

    def counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("counter", (p.Const(size, 32), p.Path("CounterType.packets")), name)

    def count(self, name: str, index: p.Expr) -> p.Stmt:
        return p.CallStmt(p.Call(p.Path(f"{name}.count"), (p.Cast("bit<32>", index),)))

    def user_counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("counter", (p.Const(size, 32), p.Path("CounterType.packets_and_bytes")), name)

    def meter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance("meter", (p.Const(size, 32), p.Path("MeterType.bytes")), name)

    def meter_stmts(self, name: str, index: p.Expr, colour: p.Expr) -> tuple[p.Stmt, ...]:
        # V1_METER_COLOR_GREEN 0, YELLOW 1, RED 2: the same as nfc's
        return (p.CallStmt(p.Call(p.Path(f"{name}.execute_meter"), (p.Cast("bit<32>", index), colour),
                                  type_args=("bit<8>",))),)

    def rest(self, hdr_type: str, meta_type: str, emit: tuple[p.Stmt, ...],
             csum_updates: tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...],
             parser: str, ingress: str) -> tuple[p.Decl, ...]:
        updates = tuple(p.CallStmt(p.Call(p.Path("update_checksum"), (
            p.Call(p.Path(f"hdr.{inst}.isValid")), p.ListExpr(fields), target, p.Path("HashAlgorithm.csum16"))))
            for inst, fields, target in csum_updates)
        cs_params = (f"inout {hdr_type} hdr", f"inout {meta_type} meta")
        return (
            p.Control("NfcVerifyChecksum", cs_params, (), (),
                      "checksums are verified in the ingress (checksum_ok() needs a per-header answer)"),
            p.Control("NfcEgress", (f"inout {hdr_type} hdr", f"inout {meta_type} meta",
                                    "inout standard_metadata_t standard_metadata"), (), ()),
            p.Control("NfcComputeChecksum", cs_params, (), updates),
            p.Control("NfcDeparser", ("packet_out pkt", f"in {hdr_type} hdr"), (), emit),
            p.Instance("V1Switch", tuple(p.Path(f"{n}()") for n in (parser, "NfcVerifyChecksum", ingress, "NfcEgress",
                                                                   "NfcComputeChecksum", "NfcDeparser")), "main"),
        )
