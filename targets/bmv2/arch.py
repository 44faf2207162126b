"""v1model specifics (p4lang/p4c p4include/v1model.p4): ``standard_metadata_t``,
``mark_to_drop``, ``hash()``, checksums in the VerifyChecksum / ComputeChecksum
controls, and the ``V1Switch`` package."""

from __future__ import annotations

from collections.abc import Callable

from targets.p4 import syntax as p
from targets.p4.arch import param as _prm

__all__ = ["V1Model"]

_HASH = {"crc16": "HashAlgorithm.crc16", "crc32": "HashAlgorithm.crc32"}


class V1Model:
    name: str = "v1model"
    idle_property: str = "support_timeout"  # p4c-bm2-ss: per-entry ageing, bmv2's ageing monitor
    includes: tuple[str, ...] = ("#include <core.p4>", "#include <v1model.p4>")
    port_type: p.Type = p.Bits(9)
    port_width: int = 9
    needs_ingress_checksum: bool = True
    deparser_checksum: bool = False  # bmv2's ALUs have no stages: csum_update is computed in place

    def parser_params(self) -> tuple[p.Param, ...]:
        return (_prm("", "packet_in", "pkt"), _prm("out", "headers_t", "hdr"), _prm("inout", "metadata_t", "meta"),
                _prm("inout", "standard_metadata_t", "standard_metadata"))

    def parser_start(self) -> tuple[p.Stmt, ...]:
        return ()

    def ingress_port(self) -> p.Expr:
        return p.ref("standard_metadata.ingress_port")

    def std_field(self, name: str) -> p.Expr | None:
        if name == "ingress_port":
            return p.Cast(p.Bits(16), p.ref("standard_metadata.ingress_port"))
        if name == "timestamp":
            return p.ref("standard_metadata.ingress_global_timestamp")
        # not packet_length: the twin runs the Tofino placement, whose switch stages cannot read it
        # (and standard_metadata.packet_length is the arriving frame, not the packet as it is now)
        return None

    def ingress_params(self) -> tuple[p.Param, ...]:
        return (_prm("inout", "headers_t", "hdr"), _prm("inout", "metadata_t", "meta"),
                _prm("inout", "standard_metadata_t", "standard_metadata"))

    def parser_error(self) -> p.Expr:
        return p.Bin("!=", p.ref("standard_metadata.parser_error"), p.ref("error.NoError"))

    def forward(self, port: p.Expr) -> tuple[p.Stmt, ...]:
        return (p.Assign(p.ref("standard_metadata.egress_spec"), p.Cast(p.Bits(9), p.Slice(port, 8, 0))),)

    def drop(self) -> tuple[p.Stmt, ...]:
        return (p.CallStmt(p.Call(p.ref("mark_to_drop"), (p.ref("standard_metadata"),))),)

    def hash_instance(self, alg: str, width: int, name: str) -> p.Instance | None:
        return None

    def hash_stmt(self, alg: str, width: int, name: str, target: p.Expr, data: p.ListExpr) -> p.Stmt:
        return p.CallStmt(p.Call(p.ref("hash"), (target, p.ref(_HASH[alg]), p.Const(0, width), data,
                                                  p.Const(1 << width, width + 1))))

    def parser_checksum(self, inst: str, flag: p.Expr) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        return (), ()

    def counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("counter"), (p.Const(size, 32, base=10), p.ref("CounterType.packets")), name)

    def count(self, name: str, index: p.Expr) -> p.Stmt:
        return p.CallStmt(p.Call(p.ref(f"{name}.count"), (p.Cast(p.Bits(32), index),)))

    def user_counter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("counter"), (p.Const(size, 32, base=10), p.ref("CounterType.packets_and_bytes")),
                          name)

    def meter_instance(self, name: str, size: int) -> p.Instance:
        return p.Instance(p.TypeName("meter"), (p.Const(size, 32, base=10), p.ref("MeterType.bytes")), name)

    def meter_stmts(self, name: str, index: p.Expr, colour: p.Expr) -> tuple[p.Stmt, ...]:
        # V1_METER_COLOR_GREEN 0, YELLOW 1, RED 2: the same as nfc's
        return (p.CallStmt(p.Call(p.ref(f"{name}.execute_meter"), (p.Cast(p.Bits(32), index), colour),
                                  type_args=(p.Bits(8),))),)

    def register_instance(self, name: str, width: int, size: int) -> p.Instance:
        return p.Instance(p.TypeName("register", (p.Bits(width),)), (p.Const(size, 32, base=10),), name)

    def register_access(self, name: str, width: int, index: p.Expr, old: p.Expr,
                        update: Callable[[p.Expr], tuple[p.Expr | None, p.Expr | None]]
                        ) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        # read into ``old``, then write at once: the same shape as TNA's RegisterAction
        guard, new = update(old)
        out: list[p.Stmt] = [p.CallStmt(p.Call(p.ref(f"{name}.read"), (old, index)))]
        if new is not None:
            write = p.CallStmt(p.Call(p.ref(f"{name}.write"), (index, new)))
            out.append(p.If(guard, (write,)) if guard is not None else write)
        return (), tuple(out)

    def rest(self, hdr_type: str, meta_type: str, emit: tuple[p.Stmt, ...],
             csum_updates: tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...],
             parser: str, ingress: str,
             deferred: tuple[tuple[str, p.Expr, tuple[p.Expr, ...], p.Expr, bool], ...] = ()) -> tuple[p.Decl, ...]:
        assert not deferred, "v1model computes csum_update in the ingress"
        updates = tuple(p.CallStmt(p.Call(p.ref("update_checksum"), (
            p.Call(p.ref(f"hdr.{inst}.isValid")), p.ListExpr(fields), target, p.ref("HashAlgorithm.csum16"))))
            for inst, fields, target in csum_updates)
        cs_params = (_prm("inout", hdr_type, "hdr"), _prm("inout", meta_type, "meta"))
        return (
            p.Control("NfcVerifyChecksum", cs_params, (), (),
                      "checksums are verified in the ingress (checksum_ok() needs a per-header answer)"),
            p.Control("NfcEgress", (*cs_params, _prm("inout", "standard_metadata_t", "standard_metadata")), (), ()),
            p.Control("NfcComputeChecksum", cs_params, (), updates),
            p.Control("NfcDeparser", (_prm("", "packet_out", "pkt"), _prm("in", hdr_type, "hdr")), (), emit),
            p.Instance(p.TypeName("V1Switch"), tuple(p.Call(p.Path(n)) for n in (
                parser, "NfcVerifyChecksum", ingress, "NfcEgress", "NfcComputeChecksum", "NfcDeparser")), "main"),
        )
