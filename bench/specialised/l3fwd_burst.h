/* bench/bench_specialised.py: bench/l3fwd.nfp's burst written by hand as a generator that
 * specialises the whole burst for the program could write it (docs/server.md, "Would the
 * specialised burst reach l3fwd?").  It replaces nfc_burst in a copy of the generated server's
 * nfc_burst.h and keeps its contract: the same outputs, counters and drop reasons as the
 * generated code (the benchmark checks the frames byte for byte first).  What it leaves out is
 * the packet model: the parse checks read the mbuf's bytes, the keys go straight into the bulk
 * trie lookup, the stage works on the packet's bytes with the answer in registers, the checksum
 * is summed and stored in network order.  Only bench/l3fwd.nfp's server, without a switch. */

/* The code of drop reason `name` in this build (nfc_reason's numbering). */
static inline int nfc_spec_reason(const char *name)
{
    for (int c = 1; c < nfc_nreasons; c++)
        if (strcmp(nfc_reason(c), name) == 0)
            return c;
    return 0;
}

static inline void nfc_burst(struct rte_mbuf **in, uint16_t n, uint16_t port, uint32_t logical, struct nfc_pkt *pkt,
                             uint8_t *scratch, struct rte_mempool *pool, struct rte_mempool *jumbo,
                             nfc_out_port_fn out_port, struct rte_mbuf **out, int *to)
{
    static int no_pipeline, truncated, not_ipv4, bad_header, options, bad_length, no_route, no_such_port;
    if (no_route == 0) {
        no_pipeline = nfc_spec_reason("no_pipeline");
        truncated = nfc_spec_reason("truncated");
        not_ipv4 = nfc_spec_reason("not_ipv4");
        bad_header = nfc_spec_reason("bad_ipv4_header");
        options = nfc_spec_reason("ipv4_options");
        bad_length = nfc_spec_reason("bad_ipv4_length");
        no_route = nfc_spec_reason("no_route");
        no_such_port = nfc_spec_reason("no_such_port");
    }
    (void)scratch;
    (void)pool;
    (void)jumbo;
    struct nfc_stats *st = pkt[0].stats;
    uint8_t keys[NFC_BURST][16];
    const uint8_t *kp[NFC_BURST];
    void *data[NFC_BURST];
    unsigned who[NFC_BURST], k = 0;
    uint64_t hits = 0;
    for (uint16_t i = 0; i < n; i++) { /* parser l3 (bench/l3fwd.nfp), the route's key */
        out[i] = NULL;
        to[i] = -1;
        struct rte_mbuf *m = in[i];
        const uint8_t *d = rte_pktmbuf_mtod(m, const uint8_t *);
        uint32_t len = rte_pktmbuf_data_len(m);
        int c = 0;
        if (m->nb_segs != 1)
            c = -1; /* the generated burst would linearise it; these flows have none */
        else if (logical > 15)
            c = no_pipeline;
        else if (len < 14)
            c = truncated;
        else if (nfc_get16(d + 12) != 0x800)
            c = not_ipv4;
        else if (len < 34)
            c = truncated;
        else if (!((d[14] >> 4) == 4 && (d[14] & 15) >= 5))
            c = bad_header;
        else if ((d[14] & 15) != 5)
            c = options;
        else if (nfc_get16(d + 16) < 20)
            c = bad_length;
        if (c != 0) {
            rte_pktmbuf_free(m);
            st->drops[c < 0 ? 0 : c]++;
            continue;
        }
        nfc_set64(keys[k], nfc_get32(d + 30) << 32);
        nfc_set64(keys[k] + 8, 0);
        kp[k] = keys[k];
        who[k++] = i;
    }
    nfc_lpm_find_bulk(&nfc_tables[0].trie, kp, k, data, &hits);
    for (unsigned j = 0; j < k; j++) { /* stage route */
        uint16_t i = (uint16_t)who[j];
        struct rte_mbuf *m = in[i];
        uint8_t *d = rte_pktmbuf_mtod(m, uint8_t *);
        if (!((hits >> j) & 1)) {
            st->misses[0]++;
            st->drops[no_route]++;
            rte_pktmbuf_free(m);
            continue;
        }
        const uint64_t *v = (const uint64_t *)data[j];
        st->hits[0]++;
        uint64_t egress = v[0];
        if (egress > 15) {
            st->drops[no_such_port]++;
            rte_pktmbuf_free(m);
            continue;
        }
        d[22] = (uint8_t)(d[22] - 1);           /* ipv4.ttl */
        nfc_store_be(d, 6, v[1]);               /* eth.dst = r.next_hop_mac */
        nfc_store_be(d + 6, 6, 0x020000000001); /* eth.src = ROUTER_MAC */
        nfc_csum_put(d + 24, d + 14, 20, 10);
        pkt[i].egress = egress;
        if ((to[i] = out_port(port, &pkt[i])) < 0) {
            st->no_port++;
            rte_pktmbuf_free(m);
            continue;
        }
        out[i] = m;
        st->forwarded++;
    }
}
