/* nfc server benchmark: the generated processing (bridge in, server stages, bridge out)
 * against baselines measured in the same run, on one lcore.
 *
 * With a port (an EAL --vdev: net_null, or net_ring primed with packets), packets/s of:
 *   io_empty  rx_burst -> tx_burst, packets untouched: the I/O ceiling of this vdev and core;
 *   io_copy   rx_burst -> copy a template packet into each mbuf -> tx_burst;
 *   nfc       rx_burst -> the same template copy -> exactly the forwarding loop's processing (nfc_burst.h)
 *             (nfc_from_switch, nfc_run, nfc_to_switch into a new mbuf, input freed) -> tx_burst,
 *             with the RCU quiescent state after every burst as in its forward() loop.
 * net_null hands out mbufs of garbage, hence the template copy (the packets of --packets,
 * in turn); io_copy measures that copy alone so the ratio nfc/io_copy is fair.
 * Without I/O, keys/s of:
 *   bulk_lookup  rte_hash_lookup_bulk_data over the table, BURST keys a call;
 *   lookup       rte_hash_lookup_data, one key a call (what the generated code does);
 * both on the keys of the template packets (nfc_bench_key), in the same order.
 * Every measurement runs --ms milliseconds, --reps times interleaved; medians are reported.
 * The in-memory nanoseconds per packet of the processing alone and of a single lookup
 * (--iters, 0: skip) are kept from the first version of this harness: one packet at a
 * time, so no lookup is prefetched for a burst; at 1M entries they are a DRAM latency
 * (~390 ns for the VPN gateway), not what the bursted forwarding loop pays per packet.
 *
 * usage: nf-bench <EAL args> -- --entries FILE --packets FILE.pcap --table NAME
 *                 [--iters N] [--ms N] [--reps N]
 * Prints one JSON line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_hash.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "nfc_burst.h"
#include "nfc_esp.h"
#include "nfc_rt.h"

#define BURST 32
#define MAX_TPL (1u << 20)
#define MAX_REPS 15
#define RING_PRIME 512 /* mbufs put into a net_ring before a run (it holds at most 1023) */

/* the template packets, each at a cache-line aligned offset of one buffer */
static uint8_t *tbuf;
static uint64_t *toff;
static uint32_t *tlen;
static uint32_t ntpl;

static int read_pcap(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    uint8_t gh[24];
    size_t cap = 1 << 20, used = 0;
    tbuf = malloc(cap);
    toff = malloc(MAX_TPL * sizeof *toff);
    tlen = malloc(MAX_TPL * sizeof *tlen);
    if (tbuf == NULL || toff == NULL || tlen == NULL || fread(gh, 1, sizeof gh, f) != sizeof gh) {
        fclose(f);
        return -1;
    }
    uint32_t rec[4];
    while (ntpl < MAX_TPL && fread(rec, 4, 4, f) == 4) {
        uint32_t caplen = rec[2];
        if (caplen == 0 || caplen > 2000)
            break;
        if (used + caplen + 64 > cap) {
            uint8_t *nb = realloc(tbuf, cap * 2);
            if (nb == NULL)
                break;
            tbuf = nb;
            cap *= 2;
        }
        if (fread(tbuf + used, 1, caplen, f) != caplen)
            break;
        toff[ntpl] = used;
        tlen[ntpl++] = caplen;
        used = (used + caplen + 63) & ~(size_t)63;
    }
    fclose(f);
    return (int)ntpl;
}

static struct rte_mempool *pool;
static uint16_t port;
static int is_ring;
static double hz;

/* nfc_main.c's out_port(): behind a switch packets go back where they came from; a
 * software-only program's logical ports are the DPDK ports here. */
static int out_port(uint16_t in_port, const struct nfc_pkt *p)
{
    if (!nfc_software)
        return in_port;
    return p->egress == in_port ? (int)in_port : -1;
}

/* Template k into mbuf m (the packet "arrives"). */
static inline void load_tpl(struct rte_mbuf *m, uint32_t k)
{
    memcpy(rte_pktmbuf_mtod(m, uint8_t *), tbuf + toff[k], tlen[k]);
    m->data_len = (uint16_t)tlen[k];
    m->pkt_len = tlen[k];
}

static int start_port(void)
{
    struct rte_eth_conf conf;
    struct rte_eth_dev_info info;
    memset(&conf, 0, sizeof conf);
    int sock = rte_eth_dev_socket_id(port);
    unsigned socket = (unsigned)(sock < 0 ? 0 : sock);
    if (rte_eth_dev_info_get(port, &info) != 0 || rte_eth_dev_configure(port, 1, 1, &conf) != 0 ||
        rte_eth_rx_queue_setup(port, 0, 1024, socket, NULL, pool) != 0 ||
        rte_eth_tx_queue_setup(port, 0, 1024, socket, NULL) != 0 || rte_eth_dev_start(port) != 0) {
        fprintf(stderr, "nf-bench: cannot start port %u\n", port);
        return -1;
    }
    is_ring = info.driver_name != NULL && strcmp(info.driver_name, "net_ring") == 0;
    return 0;
}

static void prime(void)
{
    if (!is_ring)
        return;
    struct rte_mbuf *m[BURST];
    for (uint32_t done = 0; done < RING_PRIME; done += BURST) {
        if (rte_pktmbuf_alloc_bulk(pool, m, BURST) != 0)
            return;
        for (uint32_t i = 0; i < BURST; i++)
            load_tpl(m[i], (done + i) % ntpl);
        uint16_t sent = rte_eth_tx_burst(port, 0, m, BURST);
        for (uint16_t i = sent; i < BURST; i++)
            rte_pktmbuf_free(m[i]);
    }
}

static void drain(void)
{
    struct rte_mbuf *m[BURST];
    for (int empty = 0; is_ring && empty < 4;) {
        uint16_t n = rte_eth_rx_burst(port, 0, m, BURST);
        empty = n == 0 ? empty + 1 : 0;
        for (uint16_t i = 0; i < n; i++)
            rte_pktmbuf_free(m[i]);
    }
}

enum { IO_EMPTY, IO_COPY, IO_NFC, BULK, LOOKUP, NMODES };
static const char *mode_names[NMODES] = {"io_empty", "io_copy", "nfc", "bulk_lookup", "lookup"};

/* Mpps of one I/O mode over `cycles` TSC cycles. */
static double run_io(int mode, uint64_t cycles, struct nfc_pkt *p, uint8_t *out)
{
    struct rte_mbuf *in[BURST], *o[BURST];
    unsigned lcore = rte_lcore_id();
    uint64_t pkts = 0, iter = 0;
    uint32_t k = 0;
    prime();
    uint64_t t0 = rte_rdtsc(), end = t0 + cycles, t = t0;
    while (t < end) {
        uint16_t n = rte_eth_rx_burst(port, 0, in, BURST), nout = n;
        struct rte_mbuf **send = in;
        if (mode == IO_COPY) {
            for (uint16_t i = 0; i < n; i++) {
                load_tpl(in[i], k);
                k = k + 1 == ntpl ? 0 : k + 1;
            }
        } else if (mode == IO_NFC) { /* exactly the forwarding loop's processing (nfc_burst.h) */
            static struct nfc_pkt pk[BURST];
            struct rte_mbuf *done[BURST];
            int to[BURST];
            nout = 0;
            send = o;
            for (uint16_t i = 0; i < n; i++) {
                load_tpl(in[i], k);
                k = k + 1 == ntpl ? 0 : k + 1;
            }
            if (pk[0].stats == NULL) /* once: nfc_burst counts into each packet's */
                for (uint16_t i = 0; i < BURST; i++)
                    pk[i].stats = p->stats;
            nfc_burst(in, n, port, port, pk, out, pool, NULL, out_port, done, to);
            for (uint16_t i = 0; i < n; i++)
                if (done[i] != NULL)
                    o[nout++] = done[i];
        }
        uint16_t sent = 0;
        for (int tries = 0; sent < nout && tries < 64; tries++)
            sent += rte_eth_tx_burst(port, 0, send + sent, (uint16_t)(nout - sent));
        for (uint16_t i = sent; i < nout; i++)
            rte_pktmbuf_free(send[i]);
        if (mode == IO_NFC)
            nfc_rcu_quiescent(lcore);
        pkts += n;
        if ((++iter & 15) == 0)
            t = rte_rdtsc();
    }
    t = rte_rdtsc();
    drain();
    return (double)pkts / ((double)(t - t0) / hz) / 1e6;
}

/* Mlookups/s of the bare table: bulk (BURST keys a call) or one key a call. */
static double run_lookup(int mode, uint64_t cycles, const struct rte_hash *h, const void **keyp, uint32_t nkp,
                         uint64_t *lookups, uint64_t *hits)
{
    uint64_t done = 0, hit = 0;
    uint32_t k = 0;
    void *data[BURST];
    uint64_t t0 = rte_rdtsc(), end = t0 + cycles, t = t0;
    while (t < end) {
        for (int j = 0; j < 16; j++) {
            if (mode == BULK) {
                uint64_t mask = 0;
                rte_hash_lookup_bulk_data(h, keyp + k, BURST, &mask, data);
                hit += (uint64_t)__builtin_popcountll(mask);
            } else {
                for (uint32_t i = 0; i < BURST; i++)
                    hit += rte_hash_lookup_data(h, keyp[k + i], data) >= 0;
            }
            k += BURST;
            if (k == nkp)
                k = 0;
        }
        done += 16 * BURST;
        t = rte_rdtsc();
    }
    *hits += hit;
    *lookups += done;
    return (double)done / ((double)(t - t0) / hz) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void put_runs(const char *name, const double *v, int reps, int first)
{
    printf("%s\"%s\": [", first ? "" : ", ", name);
    for (int r = 0; r < reps; r++)
        printf("%s%.3f", r ? ", " : "", v[r]);
    printf("]");
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0) {
        fprintf(stderr, "nf-bench: EAL initialisation failed\n");
        return 1;
    }
    argc -= used;
    argv += used;
    const char *entries = NULL, *packets = NULL, *table = NULL;
    uint64_t iters = 1000000, ms = 300;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--entries") == 0)
            entries = argv[i + 1];
        else if (strcmp(argv[i], "--packets") == 0)
            packets = argv[i + 1];
        else if (strcmp(argv[i], "--table") == 0)
            table = argv[i + 1];
        else if (strcmp(argv[i], "--iters") == 0)
            iters = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--ms") == 0)
            ms = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "nf-bench: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    reps = reps < 1 ? 1 : (reps > MAX_REPS ? MAX_REPS : reps);
    if (entries == NULL || packets == NULL || table == NULL) {
        fprintf(stderr, "nf-bench: --entries, --packets and --table are required\n");
        return 2;
    }
    if (nfc_tables_init() != 0 || nfc_load_entries(entries) < 0 || (nfc_uses_esp && nfc_esp_init() != 0))
        return 1;
    int ti = nfc_table_find(table);
    if (read_pcap(packets) <= 0 || ti < 0) {
        fprintf(stderr, "nf-bench: no packets in %s or no table %s\n", packets, table);
        return 1;
    }
    const uint32_t n = ntpl;
    struct rte_hash *h = nfc_tables[ti].h;
    static struct nfc_pkt p;
    static struct nfc_stats stats;
    p.stats = &stats;
    static uint8_t out[NFC_MAX_PKT];
    hz = (double)rte_get_tsc_hz();
    unsigned lcore = rte_lcore_id();
    nfc_rcu_online(lcore);

    /* in memory: the processing alone, then single lookups of the same keys */
    uint64_t sink = 0;
    uint64_t t0 = rte_rdtsc();
    for (uint64_t i = 0; i < iters; i++) {
        uint32_t k = (uint32_t)(i % n);
        if (nfc_from_switch(&p, tbuf + toff[k], tlen[k], 0) == NFC_CONTINUE && nfc_run(&p) == NFC_CONTINUE)
            sink += nfc_to_switch(&p, out, sizeof out);
    }
    uint64_t t1 = rte_rdtsc();
    /* the lookup keys of the templates; pointers padded to a multiple of BURST, cyclically */
    uint32_t kb = nfc_tables[ti].key_bytes, nkp = (n + BURST - 1) / BURST * BURST;
    uint8_t *keys = calloc(n, kb);
    const void **keyp = malloc(nkp * sizeof *keyp);
    if (keys == NULL || keyp == NULL)
        return 1;
    for (uint32_t k = 0; k < n; k++) /* as nfc_prefetch: the key of a packet that arrived whole (a
                                         * required header may go unchecked in the key) */
        if (nfc_from_switch(&p, tbuf + toff[k], tlen[k], 0) == NFC_CONTINUE)
            nfc_bench_key(ti, &p, keys + (size_t)k * kb);
    for (uint32_t k = 0; k < nkp; k++)
        keyp[k] = keys + (size_t)(k % n) * kb;
    void *data = NULL;
    uint64_t t2 = rte_rdtsc();
    for (uint64_t i = 0; i < iters; i++)
        sink += (uint64_t)(rte_hash_lookup_data(h, keyp[i % n], &data) >= 0);
    uint64_t t3 = rte_rdtsc();
    double it = iters ? (double)iters : 1.0;

    /* packets/s */
    int io = rte_eth_dev_count_avail() > 0;
    if (io) {
        pool = nfc_mbuf_pool("bench_mbufs", 8191, 256, RTE_MBUF_DEFAULT_BUF_SIZE, (int)rte_socket_id());
        if (pool == NULL || start_port() != 0) {
            fprintf(stderr, "nf-bench: cannot set up the port: %s\n", rte_strerror(rte_errno));
            return 1;
        }
    }
    memset(&stats, 0, sizeof stats);
    static double mpps[NMODES][MAX_REPS];
    uint64_t cycles = (uint64_t)((double)ms * hz / 1000.0), lookups[NMODES] = {0}, hits[NMODES] = {0};
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < NMODES; m++) {
            if (m <= IO_NFC)
                mpps[m][r] = io ? run_io(m, cycles, &p, out) : 0.0;
            else
                mpps[m][r] = run_lookup(m, cycles, h, keyp, nkp, &lookups[m], &hits[m]);
        }
    uint64_t processed = stats.forwarded + stats.no_port, drops = 0;
    for (int i = 0; i < 256; i++)
        drops += stats.drops[i];
    processed += drops;
    nfc_rcu_offline(lcore);

    printf("{\"templates\": %u, \"entries\": %u, \"port\": ", n, (unsigned)rte_hash_count(h));
    if (io) {
        struct rte_eth_dev_info info;
        rte_eth_dev_info_get(port, &info);
        printf("\"%s\"", info.driver_name);
    } else {
        printf("null");
    }
    printf(", \"nfc_ns\": %.2f, \"bare_lookup_ns\": %.2f, \"ms\": %" PRIu64 ", \"reps\": %d, \"mpps\": {",
           (double)(t1 - t0) * 1e9 / hz / it, (double)(t3 - t2) * 1e9 / hz / it, ms, reps);
    for (int m = 0; m < NMODES; m++) {
        double s[MAX_REPS];
        memcpy(s, mpps[m], sizeof s);
        qsort(s, (size_t)reps, sizeof s[0], cmp_double);
        if (m <= IO_NFC && !io)
            printf("%s\"%s\": null", m ? ", " : "", mode_names[m]);
        else
            printf("%s\"%s\": %.3f", m ? ", " : "", mode_names[m], s[reps / 2]);
    }
    printf("}, \"runs\": {");
    for (int m = 0; m < NMODES; m++)
        put_runs(mode_names[m], mpps[m], reps, m == 0);
    printf("}, \"nfc_processed\": %" PRIu64 ", \"nfc_forwarded\": %" PRIu64 ", \"nfc_drops\": %" PRIu64
           ", \"bulk_hit_ratio\": %.4f, \"lookup_hit_ratio\": %.4f, \"sink\": %" PRIu64 "}\n",
           processed, stats.forwarded, drops, (double)hits[BULK] / (double)(lookups[BULK] ? lookups[BULK] : 1),
           (double)hits[LOOKUP] / (double)(lookups[LOOKUP] ? lookups[LOOKUP] : 1), sink);
    fflush(stdout);
    if (io) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    free(keyp);
    free(keys);
    free(tbuf);
    free(toff);
    free(tlen);
    rte_eal_cleanup();
    return 0;
}
