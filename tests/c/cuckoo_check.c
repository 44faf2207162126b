/* A control-plane table whose rte_hash runs out of cuckoo paths below 7/8 full
 * (targets/dpdk/runtime/nfc_tables.c, put and regrow), for tests/test_server_tables.py (built
 * under ASan + UBSan).
 *
 *   cuckoo_check   (EAL arguments)
 *
 * The table (size 64) starts with room for its size, 74 entries: DPDK 22.11 gives it 16 buckets
 * of 8 slots (the power of two at or above 74, over 8).  A key's two buckets are its hash's low
 * bits and those bits xor the hash's top 16 bits, so 17 keys that agree on both share one pair of
 * buckets, 16 slots: the 17th finds the table full with 17 of 74 entries.  Prints "ok CAP0 CAP
 * ENTRIES STATUS": the capacity before and after the 17 adds, the entries held and the 17th
 * add's status (0: added). */
#include <stdio.h>

#include <rte_common.h>
#include <rte_eal.h>
#include <rte_lcore.h>

#include "nfc_ctl.h"
#include "nfc_rt.h"

/* what nfc_tables.c and nfc_rt.h expect of a generated program: one control-plane table */
struct nfc_table nfc_tables[1] = {{
    .name = "pairs", .src = "cuckoo_check.c", .size = 64, .nkeys = 1, .nvalues = 1, .lpm = -1,
    .inline_values = 1, .key_bytes = 16, .key_width = {32}, .value_width = {8},
}};
const int nfc_ntables = 1;
const char nfc_program[] = "cuckoo_check";
struct nfc_stats nfc_stats[RTE_MAX_LCORE];

#define SAME 17

int main(int argc, char **argv)
{
    if (rte_eal_init(argc, argv) < 0 || nfc_tables_init() != 0)
        return 2;
    struct nfc_table *t = &nfc_tables[0];
    uint32_t cap0 = t->cap, mask = rte_align32pow2(t->cap) / 8 - 1;
    uint64_t keys[SAME], value[1] = {1}, k[1];
    uint8_t key[NFC_MAX_KEY];
    uint32_t found = 0, pair = UINT32_MAX;
    for (k[0] = 1; found < SAME && k[0] < (1u << 31); k[0]++) {
        if (nfc_entry_check(t, k, value, key) != NFC_OK)
            return 3;
        uint32_t sig = rte_hash_hash(t->h, key), prim = sig & mask, sec = (prim ^ (sig >> 16)) & mask;
        if (pair == UINT32_MAX)
            pair = prim << 16 | sec;
        if ((prim << 16 | sec) == pair)
            keys[found++] = k[0];
    }
    int st = NFC_OK;
    for (uint32_t i = 0; i < found && st == NFC_OK; i++)
        st = nfc_entry_add(t, &keys[i], value, 0);
    printf("ok %u %u %u %d\n", cap0, t->cap, (unsigned)rte_hash_count(t->h), st);
    rte_eal_cleanup();
    return 0;
}
