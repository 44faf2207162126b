/* Hammers the server runtime's shared data-plane state (targets/dpdk/runtime/nfc_state.c)
 * from every EAL lcore at once, for tests/test_state_lcores.py (built under ASan + UBSan).
 *
 *   state_check MS   (EAL arguments after "--", e.g. -l 0,1)
 *
 * For MS milliseconds each lcore inserts into, and looks up, the same KEYS keys of one state
 * table: every insert publishes a record whose values check each other (v1 == v0 ^ MAGIC),
 * half the keys with a timeout of 0 so that the next lookup finds them expired and removes
 * them; every lookup reads the record it found.  A record freed while another lcore could
 * still read it is a heap-use-after-free for ASan; a torn or mixed record fails the check.
 * Each lcore passes a quiescent state every QUIESCE operations, as the forwarding loop does
 * between bursts.  Prints "ok INSERTS LOOKUPS HITS" or "bad N" and exits 0 / 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

#define KEYS 8
#define QUIESCE 64
#define MAGIC 0x5a5a5a5a5a5aull

/* what nfc_tables.c and nfc_rt.h expect of a generated program: one state table */
struct nfc_table nfc_tables[1] = {{
    .name = "flows", .src = "state_check.c", .size = 1024, .nkeys = 1, .nvalues = 2, .lpm = -1, .state = 1,
    .key_bytes = 16, .key_width = {32}, .value_width = {48, 48}, .timeout_ns = 1000000000ull,
}};
const int nfc_ntables = 1;
const char nfc_program[] = "state_check";
struct nfc_stats nfc_stats[RTE_MAX_LCORE];

static uint64_t run_ms;
static uint64_t inserts[RTE_MAX_LCORE], lookups[RTE_MAX_LCORE], hits[RTE_MAX_LCORE], bad[RTE_MAX_LCORE];

static int hammer(void *arg)
{
    (void)arg;
    unsigned lcore = rte_lcore_id();
    uint64_t end = rte_get_timer_cycles() + rte_get_timer_hz() / 1000 * run_ms, n = 0;
    nfc_rcu_online(lcore);
    while (rte_get_timer_cycles() < end) {
        for (uint32_t k = 0; k < KEYS; k++, n++) {
            uint8_t key[16] = {0};
            nfc_set32(key, k);
            uint64_t v[2] = {(n << 8 | lcore) & 0xffffffffffffull, 0};
            v[1] = (v[0] ^ MAGIC) & 0xffffffffffffull;
            if (nfc_state_insert(&nfc_tables[0], key, v, k & 1 ? 0 : 1000000000ull) == 0)
                inserts[lcore]++;
            void *data;
            lookups[lcore]++;
            if (nfc_state_find(&nfc_tables[0], key, &data)) {
                const uint64_t *r = data;
                hits[lcore]++;
                bad[lcore] += r[1] != ((r[0] ^ MAGIC) & 0xffffffffffffull);
            }
            if (n % QUIESCE == 0)
                nfc_rcu_quiescent(lcore);
        }
    }
    nfc_rcu_offline(lcore);
    return 0;
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0 || argc - used < 2)
        return 2;
    run_ms = strtoull(argv[used + 1], NULL, 10);
    if (nfc_tables_init() != 0)
        return 2;
    rte_eal_mp_remote_launch(hammer, NULL, CALL_MAIN);
    rte_eal_mp_wait_lcore();
    uint64_t ins = 0, look = 0, hit = 0, wrong = 0;
    for (unsigned i = 0; i < RTE_MAX_LCORE; i++) {
        ins += inserts[i];
        look += lookups[i];
        hit += hits[i];
        wrong += bad[i];
    }
    if (wrong)
        printf("bad %" PRIu64 "\n", wrong);
    else
        printf("ok %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", ins, look, hit);
    rte_eal_cleanup();
    return wrong ? 1 : 0;
}
