/* The hit logs of switch-cached tables (targets/dpdk/runtime/nfc_hits.c) under a writer that
 * laps its log while the reader drains it, for tests/test_server_hits.py (ASan + UBSan).
 *
 *   hits_check N   (EAL arguments after "--", e.g. -l 0,1)
 *
 * Lcore 1 notes N hits of table 0 as fast as it can, hit i with the key (i, i ^ MAGIC): every
 * key once.  The main lcore takes the counts meanwhile, as the control thread serves HITS.  A
 * sample the writer overwrote while it was being copied must be counted as lost, never
 * counted: it would show as a key counted twice (the newer sample, again at its own turn) or
 * as a torn key (a, b) with b != a ^ MAGIC.  Every hit is counted once or lost:
 * prints "ok COUNTED LOST BAD" and exits 0 when COUNTED + LOST == N and BAD == 0. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

#define MAGIC 0x5a5a5a5aull
#define MAX_HITS (1u << 22)

struct nfc_table nfc_tables[1] = {{
    .name = "hosts", .src = "hits_check.c", .size = 1024, .nkeys = 2, .nvalues = 1, .lpm = -1, .tracked = 1,
    .key_bytes = 16, .key_width = {32, 32}, .value_width = {16},
    .key_words = 2, .value_words = 1, /* as nfc_tables_init sets them (not called here) */
}};
const int nfc_ntables = 1;
const char nfc_program[] = "hits_check";
struct nfc_stats nfc_stats[RTE_MAX_LCORE];

static uint64_t n_hits;
static volatile int done;

static int writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < n_hits; i++) {
        uint8_t key[16] = {0};
        nfc_set32(key, i);
        nfc_set32(key + 4, i ^ MAGIC);
        nfc_hit_note(0, key, sizeof key);
    }
    done = 1;
    return 0;
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0 || argc - used < 2 || rte_lcore_count() < 2)
        return 2;
    n_hits = strtoull(argv[used + 1], NULL, 10);
    if (n_hits > MAX_HITS)
        return 2;
    static uint8_t seen[MAX_HITS];
    static uint64_t out[NFC_HITS_KEYS * 3];
    uint64_t counted = 0, lost = 0, not_kept_all = 0, bad = 0;
    rte_eal_remote_launch(writer, NULL, rte_get_next_lcore(-1, 1, 0));
    for (int last = 0; !last;) {
        last = done; /* one more take after the writer is done */
        uint64_t not_kept = 0, in_logs = 0;
        uint32_t n = nfc_hits_take(0, out, NFC_HITS_KEYS, &not_kept, &in_logs);
        not_kept_all += not_kept; /* none expected: a take drains at most one log of new keys */
        lost = in_logs + not_kept_all; /* in_logs: since the start */
        for (uint32_t r = 0; r < n; r++) {
            const uint64_t *rec = &out[r * 3];
            int ok = rec[0] < n_hits && rec[1] == ((rec[0] ^ MAGIC) & 0xffffffffull) && rec[2] == 1 && !seen[rec[0]];
            bad += !ok;
            if (rec[0] < n_hits)
                seen[rec[0]] = 1;
            counted += rec[2];
        }
    }
    rte_eal_mp_wait_lcore();
    printf("%s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", counted + lost == n_hits && bad == 0 ? "ok" : "bad",
           counted, lost, bad);
    rte_eal_cleanup();
    return counted + lost == n_hits && bad == 0 ? 0 : 1;
}
