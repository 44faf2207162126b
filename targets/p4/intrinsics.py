"""What the architecture headers declare, as ``targets.p4.syntax`` nodes: the intrinsic
metadata types, typedefs, constants, enum members, extern and function signatures and the
package blocks that nfc's generated programs use.

Transcribed from the headers p4c ships (p4lang/p4c):

* ``p4include/core.p4`` (``error``, ``packet_in``, ``packet_out``, ``verify``);
* ``p4include/v1model.p4`` (``standard_metadata_t``, ``counter``, ``meter``, ``hash``,
  ``mark_to_drop``, checksums, ``V1Switch``); the line numbers below are those of the
  current file, as p4c's preprocessor reports them, with ``V1MODEL_VERSION`` left at its
  default 20180101 (nfc's programs do not define it), which selects
  ``counter.count(in bit<32> index)`` and ``meter.execute_meter<T>(in bit<32> index, ...)``;
* ``backends/tofino/bf-p4c/p4include/``: ``tna.p4`` includes ``tofino1_specs.p4`` (typedefs,
  ``PORT_METADATA_SIZE``) and ``tofino1_arch.p4`` (blocks, packages), which includes
  ``tofino1_base.p4`` (intrinsic metadata, enums, externs); ``t2na.p4`` includes the
  ``tofino2_*`` files of the same structure.  Line numbers are those of the stored copies
  (tofino1_base.p4 at 4d9bc81, tofino1_specs.p4 at 2ec8e73, tofino1_arch.p4 and
  tofino2_arch.p4 at 2f382d1, tofino2_specs.p4 at 6663b2d, tofino2_base.p4 at 2ec8e73).

The switch model's P4 executor imports this module: keep the names of the public API.
Widths the headers compute from macros (``@padding bit<(4 - PORT_ID_WIDTH % 8)> _pad2``) are
given evaluated for the chip.  Field-level ``@padding`` annotations have no place in the
syntax tree; the pads are the fields named ``_pad*``.
"""

from __future__ import annotations

from dataclasses import dataclass

from targets.p4 import syntax as p

__all__ = [
    "ARCHS",
    "BlockSig",
    "ExternSig",
    "MethodSig",
    "PackageSig",
    "ParamSig",
    "arch_of",
    "blocks",
    "constant_types",
    "constants",
    "enum_members",
    "enum_types",
    "externs",
    "functions",
    "header_methods",
    "match_kinds",
    "meter_colours",
    "packages",
    "typedefs",
    "types",
]

ARCHS = ("tna", "t2na", "v1model")

_INCLUDES = {"tna.p4": "tna", "t2na.p4": "t2na", "v1model.p4": "v1model"}


def arch_of(program: p.Program) -> str:
    """"tna", "t2na" or "v1model", from the ``#include <...>`` lines of the preamble."""
    found = [_INCLUDES[line.split("<", 1)[1].split(">", 1)[0]] for line in program.preamble
             if line.startswith("#include <") and line.split("<", 1)[1].split(">", 1)[0] in _INCLUDES]
    if len(found) != 1:
        raise ValueError(f"the preamble must include exactly one of <tna.p4>, <t2na.p4>, <v1model.p4>, not {found}")
    return found[0]


def _check(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"architecture must be one of {', '.join(ARCHS)}, not {arch!r}")
    return arch


# ---- signatures ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamSig:
    """A parameter: ``direction`` is "", "in", "out" or "inout"; a ``TypeName`` that names
    one of the enclosing signature's type parameters is a type variable."""

    direction: str
    type: p.Type
    name: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class MethodSig:
    """A method, constructor (``returns`` is None and ``name`` is the extern's) or function."""

    name: str
    params: tuple[ParamSig, ...]
    returns: p.Type | None = None  # None: void
    type_params: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True)
class ExternSig:
    name: str
    type_params: tuple[str, ...]
    constructors: tuple[MethodSig, ...]
    methods: tuple[MethodSig, ...]  # several with one name: overloads
    source: str = ""
    abstract: tuple[MethodSig, ...] = ()  # methods an instance implements in its initializer


    def overloads(self, method: str) -> tuple[MethodSig, ...]:
        return tuple(m for m in self.methods if m.name == method)


@dataclass(frozen=True, slots=True)
class BlockSig:
    """A parser or control type of the architecture (``IngressParserT<H, M>(...)``)."""

    kind: str  # "parser" | "control"
    name: str
    type_params: tuple[str, ...]
    params: tuple[ParamSig, ...]
    source: str = ""


@dataclass(frozen=True, slots=True)
class PackageSig:
    """A package; ``flows`` lists, for one packet, the argument positions whose blocks run
    in order on the same headers (the architecture's dataflow, not in the header text)."""

    name: str
    type_params: tuple[str, ...]
    params: tuple[ParamSig, ...]
    flows: tuple[tuple[int, ...], ...] = ()
    source: str = ""


def _b(width: int) -> p.Bits:
    return p.Bits(width)


def _t(name: str, *args: p.Type) -> p.TypeName:
    return p.TypeName(name, tuple(args))


def _prm(direction: str, type_: p.Type, name: str, optional: bool = False) -> ParamSig:
    return ParamSig(direction, type_, name, optional)


# ---- core.p4 (p4lang/p4c p4include/core.p4) ------------------------------------------------

# core.p4 lines 23-32: error { NoError, PacketTooShort, NoMatch, StackOutOfBounds,
# HeaderTooShort, ParserTimeout, ParserInvalidArgument }
_CORE_ERRORS = ("NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds", "HeaderTooShort", "ParserTimeout",
                "ParserInvalidArgument")

_PACKET_IN = ExternSig("packet_in", (), (), (
    MethodSig("extract", (_prm("out", _t("T"), "hdr"),), None, ("T",), "core.p4:38"),
    MethodSig("extract", (_prm("out", _t("T"), "variableSizeHeader"),
                          _prm("in", _b(32), "variableFieldSizeInBits")), None, ("T",), "core.p4:43-44"),
    MethodSig("lookahead", (), _t("T"), ("T",), "core.p4:48"),
    MethodSig("advance", (_prm("in", _b(32), "sizeInBits"),), None, (), "core.p4:50"),
    MethodSig("length", (), _b(32), (), "core.p4:53"),
), "core.p4:34-54")

_PACKET_OUT = ExternSig("packet_out", (), (), (
    MethodSig("emit", (_prm("in", _t("T"), "hdr"),), None, ("T",), "core.p4:60"),
), "core.p4:56-61")

_VERIFY = MethodSig("verify", (_prm("in", p.Bool(), "check"), _prm("in", _t("error"), "toSignal")), None, (),
                    "core.p4:66")

_CORE_MATCH_KINDS = ("exact", "ternary", "lpm")

# P4_16 spec v1.2.5 §8.17 (operations on headers): isValid / setValid / setInvalid
_HEADER_METHODS = {
    "isValid": MethodSig("isValid", (), p.Bool(), (), "P4_16 §8.17"),
    "setValid": MethodSig("setValid", (), None, (), "P4_16 §8.17"),
    "setInvalid": MethodSig("setInvalid", (), None, (), "P4_16 §8.17"),
}


def header_methods() -> dict[str, MethodSig]:
    """The methods every header has (no architecture header declares them: the language does)."""
    return dict(_HEADER_METHODS)


# ---- TNA (tofino1_*.p4) and T2NA (tofino2_*.p4) ----------------------------------------------

# tofino1_specs.p4 lines 40-61 / tofino2_specs.p4 lines 40-64: COMMON TYPES
_TNA_WIDTHS = {
    1: {"PortId_t": 9, "MulticastGroupId_t": 16, "QueueId_t": 5, "MirrorType_t": 3, "MirrorId_t": 10,
        "ResubmitType_t": 3, "DigestType_t": 3, "ReplicationId_t": 16, "L1ExclusionId_t": 16, "L2ExclusionId_t": 9},
    2: {"PortId_t": 9, "MulticastGroupId_t": 16, "QueueId_t": 7, "MirrorType_t": 4, "MirrorId_t": 8,
        "ResubmitType_t": 3, "DigestType_t": 3, "ReplicationId_t": 16, "L1ExclusionId_t": 16, "L2ExclusionId_t": 9},
}
# tofino1_specs.p4 line 64: const bit<32> PORT_METADATA_SIZE = 32w64;
# tofino2_specs.p4 line 67: const bit<32> PORT_METADATA_SIZE = 32w192;
_PORT_METADATA_SIZE = {1: 64, 2: 192}

# tofino1_base.p4 lines 46-57 (tofino2_base.p4 lines 53-64, no DST_CONT, adds CSUM_MBE)
_PARSER_ERRORS = {
    1: {"PARSER_ERROR_OK": 0x0000, "PARSER_ERROR_NO_MATCH": 0x0001, "PARSER_ERROR_PARTIAL_HDR": 0x0002,
        "PARSER_ERROR_CTR_RANGE": 0x0004, "PARSER_ERROR_TIMEOUT_USER": 0x0008, "PARSER_ERROR_TIMEOUT_HW": 0x0010,
        "PARSER_ERROR_SRC_EXT": 0x0020, "PARSER_ERROR_DST_CONT": 0x0040, "PARSER_ERROR_PHV_OWNER": 0x0080,
        "PARSER_ERROR_MULTIWRITE": 0x0100, "PARSER_ERROR_ARAM_MBE": 0x0400, "PARSER_ERROR_FCS": 0x0800},
    2: {"PARSER_ERROR_OK": 0x0000, "PARSER_ERROR_NO_MATCH": 0x0001, "PARSER_ERROR_PARTIAL_HDR": 0x0002,
        "PARSER_ERROR_CTR_RANGE": 0x0004, "PARSER_ERROR_TIMEOUT_USER": 0x0008, "PARSER_ERROR_TIMEOUT_HW": 0x0010,
        "PARSER_ERROR_SRC_EXT": 0x0020, "PARSER_ERROR_PHV_OWNER": 0x0080, "PARSER_ERROR_MULTIWRITE": 0x0100,
        "PARSER_ERROR_ARAM_MBE": 0x0400, "PARSER_ERROR_FCS": 0x0800, "PARSER_ERROR_CSUM_MBE": 0x1000},
}

# tofino1_base.p4 lines 59-85 (tofino2_base.p4 lines 66-92): enums.  Only MeterColor_t has a
# representation in the header; the others are numbered in declaration order (p4c's order).
_TNA_ENUMS: dict[str, tuple[tuple[str, ...], p.Type | None]] = {
    "MeterType_t": (("PACKETS", "BYTES"), None),
    "MeterColor_t": (("GREEN", "YELLOW", "RED"), _b(8)),
    "CounterType_t": (("PACKETS", "BYTES", "PACKETS_AND_BYTES"), None),
    "SelectorMode_t": (("FAIR", "RESILIENT"), None),
    "HashAlgorithm_t": (("IDENTITY", "RANDOM", "XOR8", "XOR16", "XOR32", "CRC8", "CRC16", "CRC32", "CRC64", "CUSTOM"),
                        None),
}
# tofino1_base.p4 line 62: enum bit<8> MeterColor_t { GREEN = 8w0, YELLOW = 8w1, RED = 8w3 }
_TNA_METER_COLOURS = {"GREEN": 0, "YELLOW": 1, "RED": 3}
# tofino1_base.p4 lines 96-109 (tofino2_base.p4 lines 104-117): error members TNA adds
_TNA_ERRORS = ("CounterRange", "Timeout", "PhvOwner", "MultiWrite", "IbufOverflow", "IbufUnderflow")
# tofino1_base.p4 lines 87-94; tofino2_base.p4 lines 94-102 add dleft_hash
_TNA_MATCH_KINDS = {1: ("range", "selector", "atcam_partition_index"),
                    2: ("range", "selector", "dleft_hash", "atcam_partition_index")}


def _tna_types(chip: int) -> dict[str, p.HeaderType | p.Struct]:
    w = _TNA_WIDTHS[chip]
    port, queue = w["PortId_t"], w["QueueId_t"]
    port_t, queue_t = _t("PortId_t"), _t("QueueId_t")
    base = "tofino1_base.p4" if chip == 1 else "tofino2_base.p4"
    intrinsic = (p.Annotation("__intrinsic_metadata"),)
    lines = {1: {"ig": "114-128", "tm": "130-193", "prsr": "195-205", "dprsr": "207-221", "eg": "226-288",
                 "eg_prsr": "290-300", "eg_dprsr": "302-317", "oport": "319-335"},
             2: {"ig": "122-137", "tm": "139-202", "prsr": "204-214", "dprsr": "216-253", "eg": "268-331",
                 "eg_prsr": "334-344", "eg_dprsr": "346-376", "oport": "378-394"}}[chip]
    ig = p.HeaderType("ingress_intrinsic_metadata_t", (
        ("resubmit_flag", _b(1)),
        ("_pad1", _b(1)),
        ("packet_version", _b(2)),
        ("_pad2", _b(4 - port % 8)),  # @padding bit<(4 - PORT_ID_WIDTH % 8)>
        ("ingress_port", port_t),
        ("ingress_mac_tstamp", _b(48)),
    ), f"{base} lines {lines['ig']}: extracted by the ingress parser, then PORT_METADATA_SIZE bits", intrinsic)
    tm = p.Struct("ingress_intrinsic_metadata_for_tm_t", (
        ("ucast_egress_port", port_t),
        ("bypass_egress", _b(1)),
        ("deflect_on_drop", _b(1)),
        ("ingress_cos", _b(3)),
        ("qid", queue_t),
        ("icos_for_copy_to_cpu", _b(3)),
        ("copy_to_cpu", _b(1)),
        ("packet_color", _b(2)),
        ("disable_ucast_cutthru", _b(1)),
        ("enable_mcast_cutthru", _b(1)),
        ("mcast_grp_a", _t("MulticastGroupId_t")),
        ("mcast_grp_b", _t("MulticastGroupId_t")),
        ("level1_mcast_hash", _b(13)),
        ("level2_mcast_hash", _b(13)),
        ("level1_exclusion_id", _t("L1ExclusionId_t")),
        ("level2_exclusion_id", _t("L2ExclusionId_t")),
        ("rid", _b(16)),
    ), f"{base} lines {lines['tm']}")
    prsr = p.Struct("ingress_intrinsic_metadata_from_parser_t", (
        ("global_tstamp", _b(48)),
        ("global_ver", _b(32)),
        ("parser_err", _b(16)),
    ), f"{base} lines {lines['prsr']}")
    dprsr_fields: tuple[tuple[str, p.Type], ...] = (
        ("drop_ctl", _b(3)),
        ("digest_type", _t("DigestType_t")),
        ("resubmit_type", _t("ResubmitType_t")),
        ("mirror_type", _t("MirrorType_t")),
    )
    mirror_ext: tuple[tuple[str, p.Type], ...] = (
        ("mirror_io_select", _b(1)),
        ("mirror_hash", _b(13)),
        ("mirror_ingress_cos", _b(3)),
        ("mirror_deflect_on_drop", _b(1)),
        ("mirror_multicast_ctrl", _b(1)),
        ("mirror_egress_port", port_t),
        ("mirror_qid", queue_t),
        ("mirror_coalesce_length", _b(8)),
        ("adv_flow_ctl", _b(32)),
        ("mtu_trunc_len", _b(14)),
        ("mtu_trunc_err_f", _b(1)),
    )
    if chip == 2:
        dprsr_fields += (*mirror_ext, ("pktgen", _b(1)), ("pktgen_address", _b(14)), ("pktgen_length", _b(10)))
    dprsr = p.Struct("ingress_intrinsic_metadata_for_deparser_t", dprsr_fields, f"{base} lines {lines['dprsr']}")
    if chip == 1:
        eg_fields: tuple[tuple[str, p.Type], ...] = (
            ("_pad0", _b(8 - port % 8)), ("egress_port", port_t),
            ("_pad1", _b(5)), ("enq_qdepth", _b(19)),
            ("_pad2", _b(6)), ("enq_congest_stat", _b(2)),
            ("_pad3", _b(14)), ("enq_tstamp", _b(18)),
            ("_pad4", _b(5)), ("deq_qdepth", _b(19)),
            ("_pad5", _b(6)), ("deq_congest_stat", _b(2)),
            ("app_pool_congest_stat", _b(8)),
            ("_pad6", _b(14)), ("deq_timedelta", _b(18)),
            ("egress_rid", _b(16)),
            ("_pad7", _b(7)), ("egress_rid_first", _b(1)),
            ("_pad8", _b(8 - queue % 8)), ("egress_qid", queue_t),
            ("_pad9", _b(5)), ("egress_cos", _b(3)),
            ("_pad10", _b(7)), ("deflection_flag", _b(1)),
            ("pkt_length", _b(16)),
        )
    else:
        eg_fields = (
            ("_pad0", _b(8 - port % 8)), ("egress_port", port_t),
            ("_pad1", _b(5)), ("enq_qdepth", _b(19)),
            ("_pad2", _b(6)), ("enq_congest_stat", _b(2)),
            ("enq_tstamp", _b(32)),
            ("_pad3", _b(5)), ("deq_qdepth", _b(19)),
            ("_pad4", _b(6)), ("deq_congest_stat", _b(2)),
            ("app_pool_congest_stat", _b(8)),
            ("deq_timedelta", _b(32)),
            ("egress_rid", _b(16)),
            ("_pad5", _b(7)), ("egress_rid_first", _b(1)),
            ("_pad6", _b(8 - queue % 8)), ("egress_qid", queue_t),
            ("_pad7", _b(5)), ("egress_cos", _b(3)),
            ("_pad8", _b(7)), ("deflection_flag", _b(1)),
            ("pkt_length", _b(16)),
            ("_pad9", _b(8)),
        )
    eg = p.HeaderType("egress_intrinsic_metadata_t", eg_fields,
                      f"{base} lines {lines['eg']}: extracted by the egress parser", intrinsic)
    eg_prsr = p.Struct("egress_intrinsic_metadata_from_parser_t", (
        ("global_tstamp", _b(48)),
        ("global_ver", _b(32)),
        ("parser_err", _b(16)),
    ), f"{base} lines {lines['eg_prsr']}")
    eg_dprsr_fields: tuple[tuple[str, p.Type], ...] = (
        ("drop_ctl", _b(3)),
        ("mirror_type", _t("MirrorType_t")),
        ("coalesce_flush", _b(1)),
        ("coalesce_length", _b(7)),
    )
    if chip == 2:
        eg_dprsr_fields += mirror_ext
    eg_dprsr = p.Struct("egress_intrinsic_metadata_for_deparser_t", eg_dprsr_fields,
                        f"{base} lines {lines['eg_dprsr']}")
    oport = p.Struct("egress_intrinsic_metadata_for_output_port_t", (
        ("capture_tstamp_on_tx", _b(1)),
        ("update_delay_on_tx", _b(1)),
    ), f"{base} lines {lines['oport']}")
    out: dict[str, p.HeaderType | p.Struct] = {t.name: t for t in (ig, tm, prsr, dprsr, eg, eg_prsr, eg_dprsr, oport)}
    if chip == 2:
        # tofino2_base.p4 lines 257-263 (the optional ghost thread's input)
        out["ghost_intrinsic_metadata_t"] = p.HeaderType("ghost_intrinsic_metadata_t", (
            ("ping_pong", _b(1)), ("qlength", _b(18)), ("qid", _b(11)), ("pipe_id", _b(2)),
        ), "tofino2_base.p4 lines 257-263", (p.Annotation("__intrinsic_metadata"), p.Annotation("__ghost_metadata")))
    return out


def _tna_externs(chip: int) -> dict[str, ExternSig]:
    base = "tofino1_base.p4" if chip == 1 else "tofino2_base.p4"
    # Tofino-2 adds "@optional bool true_egress_accounting" to the Counter and Meter constructors
    t2 = (_prm("", p.Bool(), "true_egress_accounting", True),) if chip == 2 else ()
    checksum = ExternSig("Checksum", (), (MethodSig("Checksum", ()),), (
        MethodSig("add", (_prm("in", _t("T"), "data"),), None, ("T",)),
        MethodSig("subtract", (_prm("in", _t("T"), "data"),), None, ("T",)),
        MethodSig("verify", (), p.Bool()),
        MethodSig("subtract_all_and_deposit", (_prm("out", _t("T"), "residual"),), None, ("T",)),
        MethodSig("get", (), _b(16)),
        MethodSig("update", (_prm("in", _t("T"), "data"), _prm("in", p.Bool(), "zeros_as_ones", True)), _b(16), ("T",)),
    ), f"{base} extern Checksum" + (" (lines 410-444)" if chip == 1 else ""))
    hash_ = ExternSig("Hash", ("W",), (
        MethodSig("Hash", (_prm("", _t("HashAlgorithm_t"), "algo"),)),
        MethodSig("Hash", (_prm("", _t("HashAlgorithm_t"), "algo"), _prm("", _t("CRCPolynomial", _t("_")), "poly"))),
    ), (MethodSig("get", (_prm("in", _t("D"), "data"),), _t("W"), ("D",)),),
        f"{base} extern Hash<W>" + (" (lines 509-523)" if chip == 1 else ""))
    counter = ExternSig("Counter", ("W", "I"), (
        MethodSig("Counter", (_prm("", _b(32), "size"), _prm("", _t("CounterType_t"), "type"), *t2)),
    ), (MethodSig("count", (_prm("in", _t("I"), "index"), _prm("in", _b(32), "adjust_byte_count", True))),),
        f"{base} extern Counter<W, I>" + (" (lines 557-572)" if chip == 1 else ""))
    meter = ExternSig("Meter", ("I",), (
        MethodSig("Meter", (_prm("", _b(32), "size"), _prm("", _t("MeterType_t"), "type"), *t2)),
        MethodSig("Meter", (_prm("", _b(32), "size"), _prm("", _t("MeterType_t"), "type"), _prm("", _b(8), "red"),
                            _prm("", _b(8), "yellow"), _prm("", _b(8), "green"), *t2)),
    ), (
        MethodSig("execute", (_prm("in", _t("I"), "index"), _prm("in", _t("MeterColor_t"), "color"),
                              _prm("in", _b(32), "adjust_byte_count", True)), _b(8)),
        MethodSig("execute", (_prm("in", _t("I"), "index"), _prm("in", _b(32), "adjust_byte_count", True)), _b(8)),
    ), f"{base} extern Meter<I>" + (" (lines 581-587)" if chip == 1 else ""))
    crc = ExternSig("CRCPolynomial", ("T",), (MethodSig("CRCPolynomial", (
        _prm("", _t("T"), "coeff"), _prm("", p.Bool(), "reversed"), _prm("", p.Bool(), "msb"),
        _prm("", p.Bool(), "extended"), _prm("", _t("T"), "init"), _prm("", _t("T"), "xor"))),), (),
        f"{base} extern CRCPolynomial<T> (the second Hash constructor's argument)")
    register = ExternSig("Register", ("T", "I"), (
        MethodSig("Register", (_prm("", _b(32), "size"),)),
        MethodSig("Register", (_prm("", _b(32), "size"), _prm("", _t("T"), "initial_value"))),
    ), (MethodSig("read", (_prm("in", _t("I"), "index"),), _t("T")),
        MethodSig("write", (_prm("in", _t("I"), "index"), _prm("in", _t("T"), "value")), _t("T"))),
        f"{base} extern Register<T, I>")
    action = ExternSig("RegisterAction", ("T", "I", "U"), (
        MethodSig("RegisterAction", (_prm("", _t("Register", _t("_"), _t("_")), "reg"),)),
    ), (MethodSig("execute", (_prm("in", _t("I"), "index"),), _t("U")),),
        f"{base} extern RegisterAction<T, I, U> (apply: @synchronous(execute, execute_log))",
        abstract=(MethodSig("apply", (_prm("inout", _t("T"), "value"), _prm("out", _t("U"), "rv", True))),))
    return {e.name: e for e in (_PACKET_IN, _PACKET_OUT, checksum, crc, hash_, counter, meter, register, action)}


def _tna_blocks(chip: int) -> tuple[dict[str, BlockSig], dict[str, PackageSig]]:
    """tofino1_arch.p4 lines 40-85 (blocks) and 87-102 (packages); tofino2_arch.p4 lines 40-88
    and 90-106.  On Tofino-2 the intrinsic parameters the generators use are not ``@optional``,
    and ``Pipeline`` takes an optional ``GhostT`` seventh block."""
    arch_file = "tofino1_arch.p4" if chip == 1 else "tofino2_arch.p4"
    opt = chip == 1
    h, m = _t("H"), _t("M")
    blocks_ = (
        BlockSig("parser", "IngressParserT", ("H", "M"), (
            _prm("", _t("packet_in"), "pkt"), _prm("out", h, "hdr"), _prm("out", m, "ig_md"),
            _prm("out", _t("ingress_intrinsic_metadata_t"), "ig_intr_md", opt),
            _prm("out", _t("ingress_intrinsic_metadata_for_tm_t"), "ig_intr_md_for_tm", True),
            _prm("out", _t("ingress_intrinsic_metadata_from_parser_t"), "ig_intr_md_from_prsr", True)), arch_file),
        BlockSig("parser", "EgressParserT", ("H", "M"), (
            _prm("", _t("packet_in"), "pkt"), _prm("out", h, "hdr"), _prm("out", m, "eg_md"),
            _prm("out", _t("egress_intrinsic_metadata_t"), "eg_intr_md", opt),
            _prm("out", _t("egress_intrinsic_metadata_from_parser_t"), "eg_intr_md_from_prsr", True),
            _prm("out", _t("egress_intrinsic_metadata_for_deparser_t"), "eg_intr_md_for_dprsr", True)), arch_file),
        BlockSig("control", "IngressT", ("H", "M"), (
            _prm("inout", h, "hdr"), _prm("inout", m, "ig_md"),
            _prm("in", _t("ingress_intrinsic_metadata_t"), "ig_intr_md", opt),
            _prm("in", _t("ingress_intrinsic_metadata_from_parser_t"), "ig_intr_md_from_prsr", opt),
            _prm("inout", _t("ingress_intrinsic_metadata_for_deparser_t"), "ig_intr_md_for_dprsr", opt),
            _prm("inout", _t("ingress_intrinsic_metadata_for_tm_t"), "ig_intr_md_for_tm", opt),
            *((_prm("in", _t("ghost_intrinsic_metadata_t"), "gh_intr_md", True),) if chip == 2 else ())), arch_file),
        BlockSig("control", "EgressT", ("H", "M"), (
            _prm("inout", h, "hdr"), _prm("inout", m, "eg_md"),
            _prm("in", _t("egress_intrinsic_metadata_t"), "eg_intr_md", opt),
            _prm("in", _t("egress_intrinsic_metadata_from_parser_t"), "eg_intr_md_from_prsr", opt),
            _prm("inout", _t("egress_intrinsic_metadata_for_deparser_t"), "eg_intr_md_for_dprsr", opt),
            _prm("inout", _t("egress_intrinsic_metadata_for_output_port_t"), "eg_intr_md_for_oport", opt)),
            arch_file),
        BlockSig("control", "IngressDeparserT", ("H", "M"), (
            _prm("", _t("packet_out"), "pkt"), _prm("inout", h, "hdr"), _prm("in", m, "metadata"),
            _prm("in", _t("ingress_intrinsic_metadata_for_deparser_t"), "ig_intr_md_for_dprsr", opt),
            _prm("in", _t("ingress_intrinsic_metadata_t"), "ig_intr_md", True)), arch_file),
        BlockSig("control", "EgressDeparserT", ("H", "M"), (
            _prm("", _t("packet_out"), "pkt"), _prm("inout", h, "hdr"), _prm("in", m, "metadata"),
            _prm("in", _t("egress_intrinsic_metadata_for_deparser_t"), "eg_intr_md_for_dprsr", opt),
            _prm("in", _t("egress_intrinsic_metadata_t"), "eg_intr_md", True),
            _prm("in", _t("egress_intrinsic_metadata_from_parser_t"), "eg_intr_md_from_prsr", True)), arch_file),
        *((BlockSig("control", "GhostT", (), (_prm("in", _t("ghost_intrinsic_metadata_t"), "gh_intr_md"),),
                    arch_file),) if chip == 2 else ()),
    )
    ih, im, eh, em = _t("IH"), _t("IM"), _t("EH"), _t("EM")
    pipeline = PackageSig("Pipeline", ("IH", "IM", "EH", "EM"), (
        _prm("", _t("IngressParserT", ih, im), "ingress_parser"),
        _prm("", _t("IngressT", ih, im), "ingress"),
        _prm("", _t("IngressDeparserT", ih, im), "ingress_deparser"),
        _prm("", _t("EgressParserT", eh, em), "egress_parser"),
        _prm("", _t("EgressT", eh, em), "egress"),
        _prm("", _t("EgressDeparserT", eh, em), "egress_deparser"),
        *((_prm("", _t("GhostT"), "ghost", True),) if chip == 2 else ()),
    ), ((0, 1, 2), (3, 4, 5)), arch_file)
    pipes = tuple(_t("Pipeline", *(_t(f"{x}{i}") for x in ("IH", "IM", "EH", "EM"))) for i in range(4))
    switch = PackageSig("Switch", tuple(f"{x}{i}" for i in range(4) for x in ("IH", "IM", "EH", "EM")), tuple(
        _prm("", t, f"pipe{i}", i > 0) for i, t in enumerate(pipes)), (), arch_file)
    return {b.name: b for b in blocks_}, {pipeline.name: pipeline, switch.name: switch}


# ---- v1model (p4lang/p4c p4include/v1model.p4) -----------------------------------------------

# v1model.p4 lines 72-123
_STANDARD_METADATA = p.Struct("standard_metadata_t", (
    ("ingress_port", _b(9)),
    ("egress_spec", _b(9)),
    ("egress_port", _b(9)),
    ("instance_type", _b(32)),
    ("packet_length", _b(32)),
    ("enq_timestamp", _b(32)),
    ("enq_qdepth", _b(19)),
    ("deq_timedelta", _b(32)),
    ("deq_qdepth", _b(19)),
    ("ingress_global_timestamp", _b(48)),
    ("egress_global_timestamp", _b(48)),
    ("mcast_grp", _b(16)),
    ("egress_rid", _b(16)),
    ("checksum_error", _b(1)),
    ("parser_error", _t("error")),
    ("priority", _b(3)),
), "v1model.p4 lines 72-123 (@metadata @name(\"standard_metadata\"))")

# v1model.p4 lines 125-134 (CounterType, MeterType), 403-412 (HashAlgorithm), CloneType after hash()
_V1_ENUMS: dict[str, tuple[tuple[str, ...], p.Type | None]] = {
    "CounterType": (("packets", "bytes", "packets_and_bytes"), None),
    "MeterType": (("packets", "bytes"), None),
    "HashAlgorithm": (("crc32", "crc32_custom", "crc16", "crc16_custom", "random", "identity", "csum16", "xor16"),
                      None),
    "CloneType": (("I2E", "E2E"), None),
}
# v1model.p4: #define V1MODEL_METER_COLOR_GREEN 0 / _YELLOW 1 / _RED 2 (macros: untyped integers)
_V1_METER_COLOURS = {"GREEN": 0, "YELLOW": 1, "RED": 2}

_V1_EXTERNS = {e.name: e for e in (
    _PACKET_IN,
    _PACKET_OUT,
    ExternSig("counter", (), (MethodSig("counter", (_prm("", _b(32), "size"), _prm("", _t("CounterType"), "type")),
                                        source="v1model.p4:156"),),
              (MethodSig("count", (_prm("in", _b(32), "index"),), source="v1model.p4:174"),), "v1model.p4:140-176"),
    ExternSig("meter", (), (MethodSig("meter", (_prm("", _b(32), "size"), _prm("", _t("MeterType"), "type")),
                                      source="v1model.p4:233"),),
              (MethodSig("execute_meter", (_prm("in", _b(32), "index"), _prm("out", _t("T"), "result")), None, ("T",),
                         "v1model.p4:258"),), "v1model.p4:215-260"),
    ExternSig("register", ("T",), (MethodSig("register", (_prm("", _b(32), "size"),), source="v1model.p4"),),
              (MethodSig("read", (_prm("out", _t("T"), "result"), _prm("in", _b(32), "index")), source="v1model.p4"),
               MethodSig("write", (_prm("in", _b(32), "index"), _prm("in", _t("T"), "value")), source="v1model.p4")),
              "v1model.p4 extern register<T> (V1MODEL_VERSION 20180101)"),
)}

_V1_FUNCTIONS = {
    "verify": (_VERIFY,),
    # v1model.p4 lines 414-415 (deprecated, no argument) and 434-435
    "mark_to_drop": (MethodSig("mark_to_drop", (), None, (), "v1model.p4:414-415 (deprecated)"),
                     MethodSig("mark_to_drop", (_prm("inout", _t("standard_metadata_t"), "standard_metadata"),), None,
                               (), "v1model.p4:434-435")),
    # v1model.p4 lines 452-453
    "hash": (MethodSig("hash", (_prm("out", _t("O"), "result"), _prm("in", _t("HashAlgorithm"), "algo"),
                                _prm("in", _t("T"), "base"), _prm("in", _t("D"), "data"), _prm("in", _t("M"), "max")),
                       None, ("O", "T", "D", "M"), "v1model.p4:452-453"),),
    # v1model.p4 line 492 and lines 513-514
    "verify_checksum": (MethodSig("verify_checksum", (
        _prm("in", p.Bool(), "condition"), _prm("in", _t("T"), "data"), _prm("in", _t("O"), "checksum"),
        _prm("", _t("HashAlgorithm"), "algo")), None, ("T", "O"), "v1model.p4:492"),),
    "update_checksum": (MethodSig("update_checksum", (
        _prm("in", p.Bool(), "condition"), _prm("in", _t("T"), "data"), _prm("inout", _t("O"), "checksum"),
        _prm("", _t("HashAlgorithm"), "algo")), None, ("T", "O"), "v1model.p4:513-514"),),
}


def _v1_blocks() -> tuple[dict[str, BlockSig], dict[str, PackageSig]]:
    """v1model.p4 lines 717-751 (the blocks) and 753-759 (``V1Switch``)."""
    h, m, std = _t("H"), _t("M"), _t("standard_metadata_t")
    blocks_ = (
        BlockSig("parser", "Parser", ("H", "M"), (_prm("", _t("packet_in"), "b"), _prm("out", h, "parsedHdr"),
                                                  _prm("inout", m, "meta"), _prm("inout", std, "standard_metadata"))),
        BlockSig("control", "VerifyChecksum", ("H", "M"), (_prm("inout", h, "hdr"), _prm("inout", m, "meta"))),
        BlockSig("control", "Ingress", ("H", "M"), (_prm("inout", h, "hdr"), _prm("inout", m, "meta"),
                                                    _prm("inout", std, "standard_metadata"))),
        BlockSig("control", "Egress", ("H", "M"), (_prm("inout", h, "hdr"), _prm("inout", m, "meta"),
                                                   _prm("inout", std, "standard_metadata"))),
        BlockSig("control", "ComputeChecksum", ("H", "M"), (_prm("inout", h, "hdr"), _prm("inout", m, "meta"))),
        BlockSig("control", "Deparser", ("H",), (_prm("", _t("packet_out"), "b"), _prm("in", h, "hdr"))),
    )
    v1switch = PackageSig("V1Switch", ("H", "M"), (
        _prm("", _t("Parser", h, m), "p"), _prm("", _t("VerifyChecksum", h, m), "vr"),
        _prm("", _t("Ingress", h, m), "ig"), _prm("", _t("Egress", h, m), "eg"),
        _prm("", _t("ComputeChecksum", h, m), "ck"), _prm("", _t("Deparser", h), "dep"),
    ), ((0, 1, 2, 3, 4, 5),), "v1model.p4:753-759")
    return {b.name: b for b in blocks_}, {v1switch.name: v1switch}


# ---- the API -------------------------------------------------------------------------------


def _chip(arch: str) -> int:
    return 2 if arch == "t2na" else 1


def types(arch: str) -> dict[str, p.HeaderType | p.Struct]:
    """The intrinsic metadata header and struct declarations, fields in header order."""
    if _check(arch) == "v1model":
        return {_STANDARD_METADATA.name: _STANDARD_METADATA}
    return _tna_types(_chip(arch))


def typedefs(arch: str) -> dict[str, p.Type]:
    """``typedef`` names → their types (``PortId_t`` → ``bit<9>``; ``ParserError_t`` → ``error``)."""
    if _check(arch) == "v1model":
        return {}
    out: dict[str, p.Type] = {name: _b(w) for name, w in _TNA_WIDTHS[_chip(arch)].items()}
    out["ParserError_t"] = _t("error")
    if arch == "t2na":
        out["CloneId_t"] = out["MirrorType_t"]  # tofino2_specs.p4 line 62
    return out


def constants(arch: str) -> dict[str, int]:
    """Constants (and, for v1model, the meter colour macros) → values."""
    if _check(arch) == "v1model":
        return {"__v1model_version": 20180101, **{f"V1MODEL_METER_COLOR_{k}": v for k, v in _V1_METER_COLOURS.items()}}
    return {"PORT_METADATA_SIZE": _PORT_METADATA_SIZE[_chip(arch)], **_PARSER_ERRORS[_chip(arch)]}


def constant_types(arch: str) -> dict[str, p.Type | None]:
    """The declared type of each of ``constants(arch)``; None: a macro (an untyped integer)."""
    if _check(arch) == "v1model":
        return {"__v1model_version": _b(32), **{f"V1MODEL_METER_COLOR_{k}": None for k in _V1_METER_COLOURS}}
    return {"PORT_METADATA_SIZE": _b(32), **{k: _b(16) for k in _PARSER_ERRORS[_chip(arch)]}}


def _enums(arch: str) -> dict[str, tuple[tuple[str, ...], p.Type | None]]:
    if _check(arch) == "v1model":
        return {**_V1_ENUMS, "error": (_CORE_ERRORS, None)}
    return {**_TNA_ENUMS, "error": (_CORE_ERRORS + _TNA_ERRORS, None)}


def enum_types(arch: str) -> dict[str, p.Type | None]:
    """Enum type names (and ``error``) → the representation type of a serializable enum, else None."""
    return {name: rep for name, (_, rep) in _enums(arch).items()}


def enum_members(arch: str) -> dict[str, int]:
    """``"HashAlgorithm_t.CRC16"``, ``"error.NoError"`` … → numeric encoding: the header's
    where it gives one (``MeterColor_t``: GREEN 0, YELLOW 1, RED 3), else the declaration
    order (what p4c and bmv2 use; for ``error``: core.p4's members, then the architecture's)."""
    out: dict[str, int] = {}
    for name, (members, _) in _enums(arch).items():
        for i, member in enumerate(members):
            out[f"{name}.{member}"] = i
    if arch != "v1model":
        out |= {f"MeterColor_t.{k}": v for k, v in _TNA_METER_COLOURS.items()}
    return out


def meter_colours(arch: str) -> dict[str, int]:
    """The colour a meter reports: TNA ``MeterColor_t`` (RED is 3), v1model's macros (RED is 2)."""
    return dict(_V1_METER_COLOURS if _check(arch) == "v1model" else _TNA_METER_COLOURS)


def match_kinds(arch: str) -> frozenset[str]:
    if _check(arch) == "v1model":
        return frozenset((*_CORE_MATCH_KINDS, "range", "optional", "selector"))  # v1model.p4 lines 58-64
    return frozenset(_CORE_MATCH_KINDS + _TNA_MATCH_KINDS[_chip(arch)])


def externs(arch: str) -> dict[str, ExternSig]:
    """Extern object types the generators instantiate or receive (``packet_in`` …), by name."""
    if _check(arch) == "v1model":
        return dict(_V1_EXTERNS)
    return _tna_externs(_chip(arch))


def functions(arch: str) -> dict[str, tuple[MethodSig, ...]]:
    """Extern functions by name → their overloads."""
    if _check(arch) == "v1model":
        return dict(_V1_FUNCTIONS)
    return {"verify": (_VERIFY,)}


def blocks(arch: str) -> dict[str, BlockSig]:
    """The parser and control types a package is built from."""
    return (_v1_blocks() if _check(arch) == "v1model" else _tna_blocks(_chip(arch)))[0]


def packages(arch: str) -> dict[str, PackageSig]:
    return (_v1_blocks() if _check(arch) == "v1model" else _tna_blocks(_chip(arch)))[1]
