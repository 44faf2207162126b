/* Tables with a ternary or range key field on the server (docs/server.md, "Ternary and range
 * tables"): DPDK's classifier, rte_acl.  The table's rte_hash keeps its rules (the rule key:
 * values, masks / prefix lengths / high bounds, priority) as for every table; after each
 * change the control thread builds a new rte_acl context from them, publishes it and frees the
 * old one after an RCU grace period, so the lcores classify lock-free throughout.
 *
 * The lookup key the generated code builds is rte_acl's input as is: a zero byte (rte_acl's
 * first field is one byte long), three bytes of padding, then each key field in ceil(w/32)
 * 4-byte chunks, network order, right-aligned.  Each chunk is a field of the rule: BITMASK for
 * exact, LPM (its prefix as a mask) and ternary parts, RANGE for a range field (at most 32
 * bits).  A packet matching several rules gets the one of highest priority, among equal
 * priorities the one added first (the reference interpreter's order): the rules are ranked so
 * before each build. */
#ifndef NFC_ACL_H
#define NFC_ACL_H

#include <stdint.h>

#include <rte_acl.h>

/* a rule key is 8 + 8 bytes per 32-bit chunk of the key: at most NFC_MAX_KEY (the generator checks) */

enum nfc_match { NFC_M_EXACT = 0, NFC_M_LPM = 1, NFC_M_TERNARY = 2, NFC_M_RANGE = 3 };

/* A built classifier: what the lcores read (RCU). */
struct nfc_acl {
    struct rte_acl_ctx *ctx; /* NULL: no rules */
    void **data;             /* the data of the rule with userdata i + 1 */
    uint32_t n;
};

struct nfc_table;
struct nfc_acl_order;

/* The bytes of the lookup key (rte_acl's input) and of the rule key (rte_hash's key). */
unsigned nfc_acl_lookup_bytes(const struct nfc_table *t);
unsigned nfc_acl_rule_bytes(const struct nfc_table *t);
/* A record (value words of each field, then the argument of each non-exact field: an LPM
 * field's prefix length as one word, a ternary field's mask or a range field's high bound in
 * its words, then the priority) packed as a rule key; NFC_OK or NFC_E_OUT_OF_RANGE (a value
 * or argument wider than its field, a prefix longer, bits outside a ternary mask, an empty
 * range, a priority of 0 or 2^31 and more). */
int nfc_acl_rule_key(const struct nfc_table *t, const uint64_t *rec, uint8_t *key);
/* The record of a rule key; how many words. */
int nfc_acl_record(const struct nfc_table *t, const uint8_t *key, uint64_t *out);
/* After the table's rte_hash took a batch (`op` of the rule keys `keys`): a classifier of
 * every rule in it, published; *old is the one it replaced, to free (nfc_acl_free) after a
 * grace period.  NFC_OK, or NFC_E_NO_MEMORY with nothing published (the caller undoes the
 * batch). */
int nfc_acl_apply(struct nfc_table *t, int op, uint8_t *const *keys, uint32_t n, struct nfc_acl **old);
void nfc_acl_free(struct nfc_acl *a);

/* The rule the lookup key matches, if any: 1 and its data, else 0. */
static inline int nfc_acl_find(struct nfc_acl *const *where, const uint8_t *key, void **data)
{
    const struct nfc_acl *a = __atomic_load_n(where, __ATOMIC_ACQUIRE);
    if (a == NULL || a->ctx == NULL)
        return 0;
    const uint8_t *in[1] = {key};
    uint32_t res = 0;
    if (rte_acl_classify(a->ctx, in, &res, 1, 1) != 0 || res == 0)
        return 0;
    *data = a->data[res - 1];
    return 1;
}

/* The same for n lookup keys at once: one rte_acl_classify for them all (it classifies several
 * keys side by side); bit j of *hits and data[j] for key j. */
static inline void nfc_acl_find_bulk(struct nfc_acl *const *where, const uint8_t *const *keys, unsigned n,
                                     void **data, uint64_t *hits)
{
    const struct nfc_acl *a = __atomic_load_n(where, __ATOMIC_ACQUIRE);
    uint32_t res[64];
    *hits = 0;
    if (a == NULL || a->ctx == NULL || n > 64 || rte_acl_classify(a->ctx, (const uint8_t **)(uintptr_t)keys, res, n, 1) != 0)
        return;
    for (unsigned j = 0; j < n; j++)
        if (res[j] != 0) {
            data[j] = a->data[res[j] - 1];
            *hits |= 1ull << j;
        }
}

#endif
