/* nfc server runtime: the processing of one received burst, shared by the forwarding loop
 * (nfc_main.c) and the benchmark (nfc_bench.c) so that what is measured is what runs.
 * Every packet of the burst is parsed first (so that its table lookups can be prefetched
 * together, nfc_prefetch), then each runs the server stages in order and its output is
 * written into its own mbuf (nfc_output).  A program whose stages cannot see what another
 * packet's did (nfc_phases > 0: no data-plane state, register write, meter or extern) runs
 * them stage by stage instead: every packet through one stage, whose lookups were looked up
 * in bulk with the keys the packets have at its entry, before any goes on to the next (a key
 * an earlier stage computes, as the DSR router's VRF, is batched too).  Hand-written, shared
 * by every generated program. */
#ifndef NFC_BURST_H
#define NFC_BURST_H

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>

#include "nfc_esp.h"
#include "nfc_rt.h"

#define NFC_BURST 32
/* the packets ahead of the one parsed whose first bytes are prefetched (l3fwd: 3; not tuned) */
#define NFC_PREFETCH_AHEAD 4
_Static_assert(NFC_BURST <= NFC_ESP_BURST, "nfc_esp_burst takes whole bursts");
_Static_assert(NFC_BURST <= NFC_PREFETCH_BURST, "nfc_prefetch takes whole bursts");

/* A pool of n mbufs of `room` data bytes, as rte_pktmbuf_pool_create makes it, except that
 * without hugepages (where IOVA is the virtual address) the mbufs are packed end to end
 * (RTE_MEMPOOL_F_NO_IOVA_CONTIG: one may span two pages, and a device still sees it
 * contiguous).  rte_pktmbuf_pool_create keeps each one within a page: without hugepages that
 * is one 2.3 KiB mbuf per 4 KiB page, every mbuf at the same offset in its page, so a burst's
 * 32 mbuf headers, and their frames' first lines, all fall in one L1 set of 8 ways and evict
 * each other between the receive, the parse and the output.  NULL: rte_errno says why. */
static inline struct rte_mempool *nfc_mbuf_pool(const char *name, unsigned n, unsigned cache, uint16_t room,
                                                int socket)
{
    if (rte_eal_has_hugepages() || rte_eal_iova_mode() != RTE_IOVA_VA) /* within a hugepage they are packed anyway */
        return rte_pktmbuf_pool_create(name, n, cache, 0, room, socket);
    struct rte_pktmbuf_pool_private priv = {.mbuf_data_room_size = room, .mbuf_priv_size = 0};
    struct rte_mempool *mp = rte_mempool_create_empty(name, n, (unsigned)sizeof(struct rte_mbuf) + room, cache,
                                                      sizeof priv, socket, RTE_MEMPOOL_F_NO_IOVA_CONTIG);
    if (mp == NULL)
        return NULL;
    int err = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL);
    if (err == 0) {
        rte_pktmbuf_pool_init(mp, &priv);
        err = rte_mempool_populate_default(mp);
    }
    if (err < 0) {
        rte_mempool_free(mp);
        rte_errno = -err;
        return NULL;
    }
    rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
    return mp;
}

/* The DPDK port a processed packet leaves by (-1: none), given the port it came in on. */
typedef int (*nfc_out_port_fn)(uint16_t in_port, const struct nfc_pkt *p);

/* A frame received over several segments, copied into one jumbo mbuf (the chain is freed);
 * NULL, with the chain left, when there is no jumbo pool, no free mbuf, or over NFC_MAX_PKT. */
static inline struct rte_mbuf *nfc_linearize(struct rte_mbuf *m, struct rte_mempool *jumbo)
{
    uint32_t len = rte_pktmbuf_pkt_len(m);
    struct rte_mbuf *j = jumbo != NULL && len <= NFC_MAX_PKT ? rte_pktmbuf_alloc(jumbo) : NULL;
    char *dst = j != NULL ? rte_pktmbuf_append(j, (uint16_t)len) : NULL;
    if (dst == NULL) {
        rte_pktmbuf_free(j);
        return NULL;
    }
    const void *src = rte_pktmbuf_read(m, 0, len, dst);
    if (src != dst)
        memcpy(dst, src, len);
    rte_pktmbuf_free(m);
    return j;
}

/* Process in[0..n) received on DPDK port `port` (the NF's logical port `logical`); out[i] is
 * the packet to send on port to[i], or NULL (dropped and counted in pkt[0].stats).  Every
 * pkt[i].stats is the lcore's counters, set once before the first burst.  `jumbo` (may be
 * NULL): the pool of NFC_MBUF_ROOM mbufs for frames over one mbuf of `pool`.  The last stage
 * (or, packet by packet, the whole run) and the output of a packet are one loop, unless the
 * program uses ESP, whose burst's crypto ends between the two. */
/* flatten: the generated nfc_from_switch, nfc_run, nfc_bench_key, nfc_bridge_out... inlined into
 * the burst (with LTO they are in reach; GCC otherwise calls a big nfc_run out of line per
 * packet): bench_l3fwd.py --routes 1000 --quick, AMD EPYC, 4 runs alternating the two builds
 * (not the same rounds), the DSR router +5 % / +8 % Mpps per CPU-second (no hugepages /
 * hugepages), bench/l3fwd.nfp unchanged; the VPN gateway's server part with 1 entry +6 % / +9 %
 * (bench_dpdk.py --skip build, one run each); the IPsec gateway's server 0.3 s longer to build */
__attribute__((flatten)) static inline void nfc_burst(struct rte_mbuf **in, uint16_t n, uint16_t port,
                                                      uint32_t logical, struct nfc_pkt *pkt, uint8_t *scratch,
                                                      struct rte_mempool *pool, struct rte_mempool *jumbo,
                                                      nfc_out_port_fn out_port, struct rte_mbuf **out, int *to)
{
    int code[NFC_BURST];
    struct nfc_stats *st = pkt[0].stats;
    const uint16_t room = nfc_new_room(pool);
    /* a received frame's bytes are not in the cache yet (a NIC wrote them; in nf-bench, the
     * template copy's stores are still on their way): each is fetched while the packets before
     * it are parsed, as l3fwd does */
    for (uint16_t i = 0; i < n && i < NFC_PREFETCH_AHEAD; i++)
        rte_prefetch0(rte_pktmbuf_mtod(in[i], const void *));
    for (uint16_t i = 0; i < n; i++) {
        if (i + NFC_PREFETCH_AHEAD < n)
            rte_prefetch0(rte_pktmbuf_mtod(in[i + NFC_PREFETCH_AHEAD], const void *));
        struct rte_mbuf *whole = in[i]->nb_segs == 1 ? in[i] : nfc_linearize(in[i], jumbo);
        if (whole != NULL)
            in[i] = whole;
        if (nfc_uses_esp) { /* ESP may encrypt or decrypt in the mbuf itself */
            int own = whole != NULL && RTE_MBUF_DIRECT(whole) && rte_mbuf_refcnt_read(whole) == 1;
            pkt[i].buf_start = own ? (uint8_t *)whole->buf_addr : NULL;
            pkt[i].buf_end = own ? pkt[i].buf_start + whole->buf_len : NULL;
            pkt[i].esp_pending = pkt[i].esp_failed = 0;
        }
        code[i] = whole == NULL ? -1
                                : nfc_from_switch(&pkt[i], rte_pktmbuf_mtod(in[i], const uint8_t *),
                                                  rte_pktmbuf_data_len(in[i]), logical);
    }
    /* the stage run in the output loop: the last phase's, or every stage (-1); none (-2) with ESP */
    int last = nfc_uses_esp ? -2 : nfc_phases > 0 ? nfc_phases - 1 : -1;
    if (nfc_phases > 0) { /* stage by stage: each stage's lookups in bulk with the keys the packets have there */
        for (int phase = 0; phase < nfc_phases; phase++) {
            nfc_prefetch(pkt, code, n, phase);
            for (uint16_t i = 0; phase != last && i < n; i++)
                if (code[i] == NFC_CONTINUE)
                    code[i] = nfc_run_phase(&pkt[i], phase);
        }
    } else { /* packet by packet: the lookups in bulk with the keys the packets arrive with */
        nfc_prefetch(pkt, code, n, -1);
        if (nfc_uses_esp) { /* the burst's encryptions run together, before any packet is written out */
            nfc_esp_batch_begin();
            nfc_esp_burst(pkt, code, n);
            for (uint16_t i = 0; i < n; i++)
                if (code[i] == NFC_CONTINUE)
                    code[i] = nfc_run(&pkt[i]);
            nfc_esp_batch_end();
            nfc_esp_burst(NULL, NULL, 0);
        }
    }
    for (uint16_t i = 0; i < n; i++) {
        int c = code[i]; /* < 0: a multi-segment frame that could not be made one */
        if (c == NFC_CONTINUE && last >= -1)
            c = last >= 0 ? nfc_run_phase(&pkt[i], last) : nfc_run(&pkt[i]);
        if (c == NFC_CONTINUE && nfc_uses_esp && pkt[i].esp_failed)
            c = nfc_crypto_drop;
        int dst = c == NFC_CONTINUE ? out_port(port, &pkt[i]) : -1;
        struct rte_mbuf *o = dst >= 0 ? nfc_output(in[i], &pkt[i], pool, room, jumbo, scratch) : NULL; /* consumes in[i] */
        out[i] = o;
        to[i] = dst;
        if (o != NULL) {
            st->forwarded++;
            continue;
        }
        if (dst < 0)
            rte_pktmbuf_free(in[i]);
        if (c == NFC_CONTINUE && dst < 0)
            st->no_port++;
        else /* 0: no mbuf to send on */
            st->drops[c > 0 ? c & 0xff : 0]++;
    }
}

#endif
