/* The all-zero key in a data-plane state table (targets/dpdk/runtime/nfc_state.c), for
 * tests/test_state_lcores.py (built under ASan + UBSan).
 *
 *   zero_key_check   (EAL arguments)
 *
 * DPDK 22.11's rte_hash mistakes the all-zero key for an empty bucket slot when that key's
 * signature is 0 (nfc_hash_seed in nfc_rt.h): with such a key Z in slot 1 of its bucket and slot
 * 0 emptied, an insert of Z makes a second entry in slot 0.  The steps: K (same bucket as Z,
 * expiring at once) then Z are inserted; a lookup of K removes it; Z is inserted twice more, the
 * second time expiring at once, and a lookup removes it.  Z must then be gone.  Prints
 * "ok HITS ENTRIES" (a lookup of Z after its removal: 1 if it found an entry; the entries the
 * table holds). */
#include <inttypes.h>
#include <stdio.h>

#include <rte_common.h>
#include <rte_eal.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

/* what nfc_tables.c and nfc_rt.h expect of a generated program: one state table */
struct nfc_table nfc_tables[1] = {{
    .name = "flows", .src = "zero_key_check.c", .size = 1024, .nkeys = 1, .nvalues = 1, .lpm = -1, .state = 1,
    .key_bytes = 16, .key_width = {32}, .value_width = {48}, .timeout_ns = 1000000000ull,
}};
const int nfc_ntables = 1;
const char nfc_program[] = "zero_key_check";
struct nfc_stats nfc_stats[RTE_MAX_LCORE];

#define LONG_NS 1000000000000ull

int main(int argc, char **argv)
{
    if (rte_eal_init(argc, argv) < 0 || nfc_tables_init() != 0)
        return 2;
    struct nfc_table *t = &nfc_tables[0];
    unsigned lcore = rte_lcore_id();
    nfc_rcu_online(lcore);
    /* rte_hash's buckets: a power of two of them, 8 slots each, for nfc_state_slots entries */
    uint32_t mask = rte_align32pow2(nfc_state_slots(t)) / 8 - 1;
    uint8_t z[16] = {0}, k[16] = {0};
    uint32_t home = rte_hash_hash(t->h, z) & mask;
    for (uint32_t i = 1; (rte_hash_hash(t->h, k) & mask) != home || i == 1; i++)
        nfc_set32(k, i);
    uint64_t v[1] = {1};
    void *data;
    nfc_state_insert(t, k, v, 0);       /* slot 0 of Z's bucket, expired at once */
    nfc_state_insert(t, z, v, LONG_NS); /* slot 1 */
    nfc_state_find(t, k, &data);        /* removes K: slot 0 empty */
    v[0] = 2;
    nfc_state_insert(t, z, v, LONG_NS); /* replaces Z's record */
    v[0] = 3;
    nfc_state_insert(t, z, v, 0);       /* again, expired at once */
    nfc_state_find(t, z, &data);        /* removes Z */
    nfc_rcu_quiescent(lcore);
    int hit = nfc_state_find(t, z, &data);
    const void *key;
    uint32_t next = 0, held = 0;
    while (rte_hash_iterate(t->h, &key, &data, &next) >= 0)
        held++;
    printf("ok %d %u\n", hit, held);
    nfc_rcu_offline(lcore);
    rte_eal_cleanup();
    return 0;
}
