/* Ternary and range tables on the server: rte_acl classifiers built from the rules the
 * table's rte_hash holds (nfc_acl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_acl.h>
#include <rte_hash.h>
#include <rte_lcore.h>

#include "nfc_ctl.h"
#include "nfc_rt.h"

/* The order rules were added in, for ties of priority (control thread only): rule keys
 * sorted by their bytes, and each one's sequence number. */
struct nfc_acl_order {
    uint32_t n, kb;
    uint64_t next;
    uint8_t *keys;
    uint64_t *seq;
};

static unsigned chunks_of(unsigned w)
{
    return (w + 31) / 32;
}

static unsigned chunks(const struct nfc_table *t)
{
    unsigned n = 0;
    for (int i = 0; i < t->nkeys; i++)
        n += chunks_of(t->key_width[i]);
    return n;
}

unsigned nfc_acl_lookup_bytes(const struct nfc_table *t)
{
    return 4 + 4 * chunks(t);
}

unsigned nfc_acl_rule_bytes(const struct nfc_table *t)
{
    return nfc_acl_lookup_bytes(t) + 4 * chunks(t) + 4;
}

/* A field's value of w bits as ceil(w/32) chunks of 4 bytes at p, network order. */
static void put_chunks(uint8_t *p, unsigned w, nfc_u128 v)
{
    unsigned n = chunks_of(w);
    for (unsigned c = 0; c < n; c++)
        nfc_set(p + 4 * c, 0, 32, (uint64_t)(v >> (32 * (n - 1 - c))) & 0xFFFFFFFFu);
}

static nfc_u128 get_chunks(const uint8_t *p, unsigned w)
{
    nfc_u128 v = 0;
    for (unsigned c = 0; c < chunks_of(w); c++)
        v = (v << 32) | nfc_get(p + 4 * c, 0, 32);
    return v;
}

/* A field's words hold at most w bits. */
static int fits_words(const uint64_t *words, unsigned w)
{
    nfc_u128 v = nfc_from_words(words, w);
    return w >= 128 || (v >> w) == 0;
}

int nfc_acl_rule_key(const struct nfc_table *t, const uint64_t *rec, uint8_t *key)
{
    unsigned lb = nfc_acl_lookup_bytes(t), off = 4, n = t->key_words;
    memset(key, 0, t->key_bytes);
    const uint64_t *vals = rec;
    for (int i = 0; i < t->nkeys; vals += nfc_words(t->key_width[i]), i++) {
        unsigned w = t->key_width[i];
        nfc_u128 v = nfc_from_words(vals, w), arg = 0, all = nfc_maskw(w);
        if (!fits_words(vals, w))
            return NFC_E_OUT_OF_RANGE;
        if (t->match[i] == NFC_M_LPM) {
            uint64_t plen = rec[n++];
            if (plen > w)
                return NFC_E_OUT_OF_RANGE;
            v &= plen == 0 ? 0 : ~nfc_maskw(w - (unsigned)plen) & all; /* stored masked to its prefix */
            arg = plen;
        } else if (t->match[i] != NFC_M_EXACT) {
            if (!fits_words(rec + n, w))
                return NFC_E_OUT_OF_RANGE;
            arg = nfc_from_words(rec + n, w);
            n += nfc_words(w);
            if (t->match[i] == NFC_M_TERNARY ? (v & ~arg) != 0 : arg < v)
                return NFC_E_OUT_OF_RANGE; /* bits outside the mask (P4Runtime refuses them too), an empty range */
        }
        put_chunks(key + off, w, v);
        put_chunks(key + lb + off - 4, w, arg);
        off += 4 * chunks_of(w);
    }
    uint64_t prio = rec[n];
    if (prio == 0 || prio >= (1ull << 31))
        return NFC_E_OUT_OF_RANGE;
    nfc_set(key + lb + 4 * chunks(t), 0, 32, prio);
    return NFC_OK;
}

int nfc_acl_record(const struct nfc_table *t, const uint8_t *key, uint64_t *out)
{
    unsigned lb = nfc_acl_lookup_bytes(t), off = 4, n = 0, a = t->key_words;
    for (int i = 0; i < t->nkeys; i++) {
        unsigned w = t->key_width[i];
        nfc_to_words(get_chunks(key + off, w), w, out + n);
        n += nfc_words(w);
        nfc_u128 arg = get_chunks(key + lb + off - 4, w);
        if (t->match[i] == NFC_M_LPM) {
            out[a++] = (uint64_t)arg;
        } else if (t->match[i] != NFC_M_EXACT) {
            nfc_to_words(arg, w, out + a);
            a += nfc_words(w);
        }
        off += 4 * chunks_of(w);
    }
    out[a++] = nfc_get(key + lb + 4 * chunks(t), 0, 32);
    return (int)a;
}

/* ---- the order rules came in -------------------------------------------------------------- */

static int64_t order_find(const struct nfc_acl_order *o, const uint8_t *key, int *found)
{
    int64_t lo = 0, hi = (int64_t)o->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int c = memcmp(o->keys + (size_t)mid * o->kb, key, o->kb);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static void order_free(struct nfc_acl_order *o)
{
    if (o != NULL) {
        free(o->keys);
        free(o->seq);
        free(o);
    }
}

/* o with a batch applied: ADD keys get the next sequence numbers, DELETE keys go; NULL: no memory. */
static struct nfc_acl_order *order_after(const struct nfc_acl_order *o, unsigned kb, int op, uint8_t *const *keys,
                                         uint32_t n)
{
    struct nfc_acl_order *x = calloc(1, sizeof *x);
    uint32_t have = o != NULL ? o->n : 0, cap = have + (op == NFC_OP_ADD ? n : 0) + 1;
    if (x == NULL || (x->keys = malloc((size_t)cap * kb)) == NULL || (x->seq = malloc((size_t)cap * 8)) == NULL) {
        order_free(x);
        return NULL;
    }
    x->kb = kb;
    x->next = o != NULL ? o->next : 1;
    x->n = have;
    if (have) {
        memcpy(x->keys, o->keys, (size_t)have * kb);
        memcpy(x->seq, o->seq, (size_t)have * 8);
    }
    for (uint32_t i = 0; i < n && op != NFC_OP_MODIFY; i++) {
        int found;
        int64_t at = order_find(x, keys[i], &found);
        size_t tail = x->n - (size_t)at - (size_t)found;
        if (op == NFC_OP_DELETE && found) {
            memmove(x->keys + (size_t)at * kb, x->keys + (size_t)(at + 1) * kb, tail * kb);
            memmove(x->seq + at, x->seq + at + 1, tail * 8);
            x->n--;
        } else if (op == NFC_OP_ADD && !found) {
            memmove(x->keys + (size_t)(at + 1) * kb, x->keys + (size_t)at * kb, tail * kb);
            memmove(x->seq + at + 1, x->seq + at, tail * 8);
            memcpy(x->keys + (size_t)at * kb, keys[i], kb);
            x->seq[at] = x->next++;
            x->n++;
        }
    }
    return x;
}

/* ---- building a classifier ---------------------------------------------------------------- */

struct ranked {
    const uint8_t *key;
    void *data;
    uint32_t prio;
    uint64_t seq;
};

static int by_rank(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* rte_acl's definition of t's rules: the one-byte first field, then a 4-byte field per chunk. */
static unsigned field_defs(const struct nfc_table *t, struct rte_acl_config *cfg)
{
    unsigned f = 0;
    cfg->defs[f++] = (struct rte_acl_field_def){.type = RTE_ACL_FIELD_TYPE_BITMASK, .size = 1, .field_index = 0,
                                                .input_index = 0, .offset = 0};
    for (int i = 0; i < t->nkeys; i++)
        for (unsigned c = 0; c < chunks_of(t->key_width[i]); c++, f++)
            cfg->defs[f] = (struct rte_acl_field_def){
                .type = t->match[i] == NFC_M_RANGE ? RTE_ACL_FIELD_TYPE_RANGE : RTE_ACL_FIELD_TYPE_BITMASK,
                .size = 4, .field_index = (uint8_t)f, .input_index = (uint8_t)f, .offset = 4 * f};
    return f;
}

/* The chunk masks of a field's argument: an LPM prefix length as a mask; a ternary mask as is;
 * a range's high bound as is (RANGE); an exact field's full mask. */
static nfc_u128 mask_of(const struct nfc_table *t, int i, nfc_u128 arg)
{
    unsigned w = t->key_width[i];
    if (t->match[i] == NFC_M_LPM)
        return arg == 0 ? 0 : ~nfc_maskw(w - (unsigned)arg) & nfc_maskw(w);
    return t->match[i] == NFC_M_EXACT ? nfc_maskw(w) : arg;
}

static void rule_of(const struct nfc_table *t, const struct ranked *r, uint32_t rank, uint32_t n,
                    struct rte_acl_rule *rule)
{
    unsigned lb = nfc_acl_lookup_bytes(t), off = 4, f = 1;
    rule->data.category_mask = 1;
    rule->data.priority = (int32_t)(n - rank); /* the best ranked highest: rte_acl takes the highest */
    rule->data.userdata = rank + 1;
    rule->field[0].value.u8 = 0;
    rule->field[0].mask_range.u8 = 0;
    for (int i = 0; i < t->nkeys; i++) {
        unsigned w = t->key_width[i], nc = chunks_of(w);
        nfc_u128 v = get_chunks(r->key + off, w), m = mask_of(t, i, get_chunks(r->key + lb + off - 4, w));
        for (unsigned c = 0; c < nc; c++, f++) {
            unsigned shift = 32 * (nc - 1 - c);
            rule->field[f].value.u32 = (uint32_t)(v >> shift); /* host order (rte_acl's rules) */
            rule->field[f].mask_range.u32 = (uint32_t)(m >> shift);
        }
        off += 4 * nc;
    }
}

void nfc_acl_free(struct nfc_acl *a)
{
    if (a != NULL) {
        rte_acl_free(a->ctx);
        free(a->data);
        free(a);
    }
}

/* A classifier of the rules in t's rte_hash, ranked by `order`; NULL: no memory. */
static struct nfc_acl *build(struct nfc_table *t, const struct nfc_acl_order *order)
{
    static unsigned made;
    uint32_t n = (uint32_t)rte_hash_count(t->h);
    struct nfc_acl *a = calloc(1, sizeof *a);
    struct ranked *r = calloc(n ? n : 1, sizeof *r);
    struct rte_acl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    unsigned nf = field_defs(t, &cfg);
    size_t rsz = RTE_ACL_RULE_SZ(nf);
    uint8_t *rules = calloc(n ? n : 1, rsz);
    if (a == NULL || r == NULL || rules == NULL || (a->data = malloc((n ? n : 1) * sizeof(void *))) == NULL)
        goto fail;
    const void *key;
    void *data;
    uint32_t next = 0, k = 0;
    while (k < n && rte_hash_iterate(t->h, &key, &data, &next) >= 0) {
        int found = 0;
        int64_t at = order_find(order, key, &found);
        r[k] = (struct ranked){key, data, nfc_get((const uint8_t *)key + nfc_acl_lookup_bytes(t) + 4 * chunks(t), 0, 32),
                               found ? order->seq[at] : UINT64_MAX};
        k++;
    }
    qsort(r, k, sizeof *r, by_rank);
    for (uint32_t i = 0; i < k; i++) {
        rule_of(t, &r[i], i, k, (struct rte_acl_rule *)(rules + (size_t)i * rsz));
        a->data[i] = r[i].data;
    }
    a->n = k;
    if (k > 0) {
        char name[RTE_ACL_NAMESIZE];
        snprintf(name, sizeof name, "nfcacl%d_%u", (int)(t - nfc_tables), made++);
        struct rte_acl_param prm = {.name = name, .socket_id = (int)rte_socket_id(), .rule_size = (uint32_t)rsz,
                                    .max_rule_num = k};
        cfg.num_categories = 1;
        cfg.num_fields = nf;
        if ((a->ctx = rte_acl_create(&prm)) == NULL ||
            rte_acl_add_rules(a->ctx, (const struct rte_acl_rule *)rules, k) != 0 || rte_acl_build(a->ctx, &cfg) != 0)
            goto fail;
    }
    free(r);
    free(rules);
    return a;
fail:
    nfc_acl_free(a);
    free(r);
    free(rules);
    return NULL;
}

int nfc_acl_apply(struct nfc_table *t, int op, uint8_t *const *keys, uint32_t n, struct nfc_acl **old)
{
    struct nfc_acl_order *order = order_after(t->acl_order, t->key_bytes, op, keys, n);
    struct nfc_acl *a = order != NULL ? build(t, order) : NULL;
    if (a == NULL) {
        order_free(order);
        return NFC_E_NO_MEMORY;
    }
    order_free(t->acl_order);
    t->acl_order = order;
    *old = t->classifier;
    __atomic_store_n(&t->classifier, a, __ATOMIC_RELEASE);
    return NFC_OK;
}
