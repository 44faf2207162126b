// p4c's Tofino back end (p4lang/p4c 1.2.5.16, backends/tofino): internal compiler error
// "Did not calculate aliasDest and aliasSrc" (phv/pragma/pa_alias.cpp:162).
// A header made valid only in the ingress (never extracted) has a field whose only write
// copies another header's validity bit; AutoAlias proposes aliasing the header field with
// the POV bit, and PragmaAlias::mayAddAlias has no case for a header field and a POV bit.
#include <core.p4>
#include <tna.p4>

header eth_h { bit<48> dst; bit<48> src; bit<16> type; }
header flags_h { bit<1> v_eth; bit<7> pad; }
struct headers_t { flags_h flags; eth_h eth; }
struct meta_t { }

parser IgParser(packet_in pkt, out headers_t hdr, out meta_t meta,
                out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        transition select(ig_intr_md.ingress_port) {
            0: accept;
            default: parse_eth;
        }
    }
    state parse_eth { pkt.extract(hdr.eth); transition accept; }
}

control Ig(inout headers_t hdr, inout meta_t meta,
           in ingress_intrinsic_metadata_t ig_intr_md,
           in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
           inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
           inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    apply {
        hdr.flags.setValid();
        hdr.flags.v_eth = (bit<1>)hdr.eth.isValid();
        ig_tm_md.ucast_egress_port = 1;
    }
}

control IgDeparser(packet_out pkt, inout headers_t hdr, in meta_t meta,
                   in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply { pkt.emit(hdr); }
}

parser EgParser(packet_in pkt, out headers_t hdr, out meta_t meta,
                out egress_intrinsic_metadata_t eg_intr_md) {
    state start { pkt.extract(eg_intr_md); transition accept; }
}

control Eg(inout headers_t hdr, inout meta_t meta,
           in egress_intrinsic_metadata_t eg_intr_md,
           in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
           inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
           inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    apply { }
}

control EgDeparser(packet_out pkt, inout headers_t hdr, in meta_t meta,
                   in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply { pkt.emit(hdr); }
}

Pipeline(IgParser(), Ig(), IgDeparser(), EgParser(), Eg(), EgDeparser()) pipe;
Switch(pipe) main;
