/* Hammers the server runtime's shared data-plane state (targets/dpdk/runtime/nfc_state.c)
 * from every EAL lcore at once, for tests/test_state_lcores.py (built under ASan + UBSan).
 *
 *   state_check MS [KEYS [LIVE_NS]]   (EAL arguments after "--", e.g. -l 0,1)
 *
 * For MS milliseconds each lcore inserts into, and looks up, the same KEYS keys (default 8) of
 * one state table of 1024 entries: every insert publishes a record whose values check each
 * other (v1 == v0 ^ MAGIC), half the keys with a timeout of 0 so that the next lookup finds
 * them expired and removes them, the others LIVE_NS (default 1 s); every lookup reads the
 * record it found.  With more keys than the table holds and a short LIVE_NS, the table is full
 * and its inserts sweep expired entries (nfc_state.c) while the other lcore reads them.  A
 * record freed while another lcore could still read it is a heap-use-after-free for ASan; a
 * torn or mixed record fails the check.  Each lcore passes a quiescent state every QUIESCE
 * operations, as the forwarding loop does between bursts.  Prints "ok INSERTS LOOKUPS HITS
 * LIVE HELD SWEPT" (the table's count of its entries, the entries it holds, the entries its
 * sweeps removed) or "bad N" and exits 0 / 1.  Key 0 (all zero bytes) is among the keys
 * (tests/c/zero_key_check.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

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

static uint64_t run_ms, live_ns = 1000000000ull;
static uint32_t keys = 8;
static uint64_t inserts[RTE_MAX_LCORE], lookups[RTE_MAX_LCORE], hits[RTE_MAX_LCORE], bad[RTE_MAX_LCORE];

static int hammer(void *arg)
{
    (void)arg;
    unsigned lcore = rte_lcore_id();
    uint64_t end = rte_get_timer_cycles() + rte_get_timer_hz() / 1000 * run_ms, n = 0;
    nfc_rcu_online(lcore);
    while (rte_get_timer_cycles() < end) {
        for (uint32_t k = 0; k < keys; k++, n++) {
            uint8_t key[16] = {0};
            nfc_set32(key, k);
            uint64_t v[2] = {(n << 8 | lcore) & 0xffffffffffffull, 0};
            v[1] = (v[0] ^ MAGIC) & 0xffffffffffffull;
            if (nfc_state_insert(&nfc_tables[0], key, v, k & 1 ? 0 : live_ns) == 0)
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
    if (argc - used > 2)
        keys = (uint32_t)strtoul(argv[used + 2], NULL, 10);
    if (argc - used > 3)
        live_ns = strtoull(argv[used + 3], NULL, 10);
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
    /* the table's count of its entries against what it holds */
    const void *key;
    void *data;
    uint32_t next = 0, held = 0;
    while (rte_hash_iterate(nfc_tables[0].h, &key, &data, &next) >= 0)
        held++;
    if (wrong)
        printf("bad %" PRIu64 "\n", wrong);
    else
        printf("ok %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %u %" PRIu64 "\n", ins, look, hit, nfc_tables[0].live, held,
               nfc_tables[0].swept);
    rte_eal_cleanup();
    return wrong ? 1 : 0;
}
