/* nfc server benchmark: per-packet cost of the generated processing (bridge in, server
 * stages, bridge out) against a bare rte_hash_lookup_data loop over the same table, both
 * measured in this run with rte_rdtsc (no NIC I/O: the machines have none; I/O is measured
 * separately against the empty-loop ceiling).
 *
 * usage: nf-bench <EAL args> -- --entries FILE --packets FILE.pcap --table NAME --iters N
 * Prints one JSON line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_hash.h>

#include "nfc_rt.h"

#define MAX_PKTS 4096

static uint8_t pkts[MAX_PKTS][2048];
static uint32_t lens[MAX_PKTS];

static int read_pcap(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    uint8_t gh[24];
    if (fread(gh, 1, sizeof gh, f) != sizeof gh) {
        fclose(f);
        return -1;
    }
    int n = 0;
    uint32_t rec[4];
    while (n < MAX_PKTS && fread(rec, 4, 4, f) == 4) {
        uint32_t caplen = rec[2];
        if (caplen > sizeof pkts[0] || fread(pkts[n], 1, caplen, f) != caplen)
            break;
        lens[n++] = caplen;
    }
    fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0)
        return 1;
    argc -= used;
    argv += used;
    const char *entries = NULL, *packets = NULL, *table = NULL;
    uint64_t iters = 1000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--entries") == 0)
            entries = argv[i + 1];
        else if (strcmp(argv[i], "--packets") == 0)
            packets = argv[i + 1];
        else if (strcmp(argv[i], "--table") == 0)
            table = argv[i + 1];
        else if (strcmp(argv[i], "--iters") == 0)
            iters = strtoull(argv[i + 1], NULL, 10);
    }
    if (entries == NULL || packets == NULL || table == NULL || nfc_tables_init(1) != 0 || nfc_load_entries(entries) < 0)
        return 1;
    int n = read_pcap(packets), ti = nfc_table_find(table);
    if (n <= 0 || ti < 0)
        return 1;
    struct rte_hash *h = nfc_tables[ti].h;
    static struct nfc_pkt p;
    static struct nfc_stats stats;
    p.stats = &stats;
    static uint8_t out[NFC_MAX_PKT];
    uint64_t sink = 0;
    uint64_t t0 = rte_rdtsc();
    for (uint64_t i = 0; i < iters; i++) {
        uint32_t k = (uint32_t)(i % (uint64_t)n);
        if (nfc_from_switch(&p, pkts[k], lens[k], 0) == NFC_CONTINUE && nfc_run(&p) == NFC_CONTINUE)
            sink += nfc_to_switch(&p, out, sizeof out);
    }
    uint64_t t1 = rte_rdtsc();
    /* baseline: the same number of lookups of the same keys, straight into rte_hash */
    static uint8_t keys[MAX_PKTS][16];
    for (int k = 0; k < n; k++) {
        nfc_from_switch(&p, pkts[k], lens[k], 0);
        nfc_bench_key(ti, &p, keys[k]);
    }
    void *data = NULL;
    uint64_t t2 = rte_rdtsc();
    for (uint64_t i = 0; i < iters; i++)
        sink += (uint64_t)(rte_hash_lookup_data(h, keys[i % (uint64_t)n], &data) >= 0);
    uint64_t t3 = rte_rdtsc();
    double hz = (double)rte_get_tsc_hz();
    printf("{\"iters\": %" PRIu64 ", \"nfc_ns\": %.2f, \"bare_lookup_ns\": %.2f, \"sink\": %" PRIu64 "}\n", iters,
           (double)(t1 - t0) * 1e9 / hz / (double)iters, (double)(t3 - t2) * 1e9 / hz / (double)iters, sink);
    rte_eal_cleanup();
    return 0;
}
