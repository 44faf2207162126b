/* Drives the server runtime's LPM trie (targets/dpdk/runtime/nfc_lpm.c) for
 * tests/test_lpm_trie.py, which holds the routes itself and checks every answer against a
 * brute-force longest match.  Keys are laid out as the generated code packs them: a VRF
 * field of VRF_BITS bits (0: none; up to NFC_LPM_DIRECT_BITS an array of roots, wider a hash
 * of them), then the LPM field of width W, then the length byte.
 *
 *   lpm_check W VRF_BITS    (EAL arguments after "--"), then commands on stdin, one per line
 *   (W up to 128; ADDR in hex, without 0x):
 *   add VRF ADDR PLEN DATA  route VRF ADDR/PLEN := DATA (ADDR is masked here)  -> "ok" | "nomem"
 *   del VRF ADDR PLEN       route gone                                          -> "ok" | "absent"
 *   find VRF ADDR           single lookup                                       -> "hit DATA" | "miss"
 *   bulk N VRF ADDR ...     N lookups at once (N <= 64), one answer per line
 *   stats                   -> "bytes B small S big G"
 *   reclaim                 free what deletes unlinked (no reader runs here)    -> "ok"
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_hash.h>

#include "nfc_rt.h"

/* nfc_rt.h declares the generated program's tables; this driver has none */
struct nfc_table nfc_tables[1];
const int nfc_ntables = 0;

static unsigned W, VRFS, OFF, LEN_OFF, KEY_BYTES = 32;
static struct nfc_lpm trie;
static struct rte_hash *rules;
static volatile uint64_t plens[3];
static uint32_t plen_count[NFC_MAX_WIDTH + 1];

static void pack(uint8_t *key, uint64_t vrf, nfc_u128 addr, int plen)
{
    memset(key, 0, KEY_BYTES);
    if (VRFS)
        nfc_set(key, 0, VRFS, vrf);
    if (plen >= 0) {
        addr &= plen == 0 ? 0 : ~nfc_maskw(W - (unsigned)plen);
        nfc_set(key, LEN_OFF, 8, (uint64_t)plen);
    }
    nfc_setw(key, OFF, W, addr & nfc_maskw(W));
}

/* An address: a hex token of up to 32 digits at s; its length in *used (0: none). */
static nfc_u128 hex_addr(const char *s, int *used)
{
    int skip = 0, n = 0;
    nfc_u128 v = 0;
    while (s[skip] == ' ')
        skip++;
    for (; n < 32 && isxdigit((unsigned char)s[skip + n]); n++) {
        char ch = (char)tolower((unsigned char)s[skip + n]);
        v = (v << 4) | (unsigned)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
    }
    *used = n ? skip + n : 0;
    return v;
}

static void count(int plen, int delta)
{
    plen_count[plen] = (uint32_t)((int)plen_count[plen] + delta);
    if (plen_count[plen])
        plens[plen >> 6] |= 1ull << (plen & 63);
    else
        plens[plen >> 6] &= ~(1ull << (plen & 63));
}

static void answer(int found, void *data)
{
    if (found)
        printf("hit %" PRIu64 "\n", (uint64_t)(uintptr_t)data);
    else
        printf("miss\n");
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0 || argc - used < 4) {
        fprintf(stderr, "usage: lpm_check EAL-ARGS -- W VRF_BITS STRIDE1\n");
        return 2;
    }
    W = (unsigned)atoi(argv[used + 1]);
    VRFS = (unsigned)atoi(argv[used + 2]);
    unsigned stride1 = (unsigned)atoi(argv[used + 3]);
    OFF = VRFS;
    LEN_OFF = OFF + W;
    rules = nfc_hash_new("rules", 1 << 16, KEY_BYTES, 0); /* seeded: VRF 0's default route is the zero key */
    if (rules == NULL || nfc_lpm_init(&trie, W, OFF, LEN_OFF, KEY_BYTES, (int)VRFS, stride1, "check") != 0) {
        fprintf(stderr, "lpm_check: set-up failed\n");
        return 1;
    }
    char line[8192];
    while (fgets(line, sizeof line, stdin) != NULL) {
        char op[16];
        uint64_t vrf = 0, data = 0;
        nfc_u128 addr = 0;
        int plen = 0, n = 0, at = 0, used = 0, len = 0;
        uint8_t key[NFC_MAX_KEY];
        if (sscanf(line, "%15s%n", op, &at) != 1)
            continue;
        /* VRF ADDR: the numbers most commands start with */
        int vrf_addr = sscanf(line + at, "%" SCNu64 "%n", &vrf, &len) == 1 &&
                       (addr = hex_addr(line + at + len, &used), used > 0);
        const char *rest = line + at + len + used;
        if (strcmp(op, "add") == 0 && vrf_addr && sscanf(rest, "%d %" SCNu64, &plen, &data) == 2) {
            pack(key, vrf, addr, plen);
            void *old;
            int fresh = rte_hash_lookup_data(rules, key, &old) < 0;
            if (nfc_lpm_set(&trie, key, (void *)(uintptr_t)data, fresh) != 0) {
                printf("nomem\n");
            } else {
                rte_hash_add_key_data(rules, key, (void *)(uintptr_t)data);
                if (fresh)
                    count(plen, +1);
                printf("ok\n");
            }
        } else if (strcmp(op, "del") == 0 && vrf_addr && sscanf(rest, "%d", &plen) == 1) {
            pack(key, vrf, addr, plen);
            if (rte_hash_del_key(rules, key) < 0) {
                printf("absent\n");
            } else {
                count(plen, -1);
                nfc_lpm_unset(&trie, key, rules, plens);
                printf("ok\n");
            }
        } else if (strcmp(op, "find") == 0 && vrf_addr) {
            void *d = NULL;
            pack(key, vrf, addr, -1);
            int found = nfc_lpm_find(&trie, key, &d);
            answer(found, d);
        } else if (strcmp(op, "bulk") == 0 && sscanf(line + at, "%d%n", &n, &plen) == 1 && n > 0 && n <= 64) {
            static uint8_t keys[64][NFC_MAX_KEY];
            const uint8_t *kp[64];
            void *d[64];
            uint64_t hits = 0;
            at += plen;
            for (int i = 0; i < n; i++) {
                int used_chars = 0;
                if (sscanf(line + at, "%" SCNu64 "%n", &vrf, &used_chars) != 1)
                    return 3;
                at += used_chars;
                addr = hex_addr(line + at, &used_chars);
                if (used_chars == 0)
                    return 3;
                at += used_chars;
                pack(keys[i], vrf, addr, -1);
                kp[i] = keys[i];
            }
            nfc_lpm_find_bulk(&trie, kp, (unsigned)n, d, &hits);
            for (int i = 0; i < n; i++)
                answer((int)((hits >> i) & 1), d[i]);
        } else if (strcmp(op, "stats") == 0) {
            printf("bytes %" PRIu64 " small %" PRIu64 " big %" PRIu64 "\n", trie.bytes, trie.tables[0], trie.tables[1]);
        } else if (strcmp(op, "reclaim") == 0) {
            nfc_lpm_reclaim();
            printf("ok\n");
        } else {
            printf("bad command\n");
        }
        fflush(stdout);
    }
    return 0;
}
