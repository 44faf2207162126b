/* nfc server runtime: an entry's data word (struct nfc_table in nfc_rt.h).  Values that fit
 * are packed into the word itself.  Otherwise the word points at a record: the values, then
 * two words.  A data-plane state entry has a record of its own, made by nfc_state.c (its layout
 * is in nfc_state.h) and freed here.  Control-plane entries with equal values
 * share one record (the first extra word counts its entries): a FIB's million routes lead
 * to a few next hops, whose records stay in cache, where a record per route would be a
 * cache miss per packet and 32 bytes a route.  Records are never changed once shared, only
 * replaced (MODIFY makes or finds another); the control thread alone makes and frees them,
 * and frees one only after a grace period (nfc_tables.c), so it needs no lock.
 * Hand-written, shared by every generated program. */
#include <stdlib.h>
#include <string.h>

#include <rte_hash_crc.h>

#include "nfc_rt.h"

/* The shared records of one table: open addressing, linear probing, at most half full. */
struct records {
    uint64_t **slot;
    size_t cap, used;
};
static struct records shared[NFC_MAX_TABLES];

static size_t home(const uint64_t *values, int n, size_t cap)
{
    return rte_hash_crc(values, (uint32_t)n * sizeof(uint64_t), 0) & (cap - 1);
}

/* The slot of the record holding `values`, or the empty slot where it would go. */
static uint64_t **find(struct records *r, const uint64_t *values, int n)
{
    size_t i = home(values, n, r->cap);
    while (r->slot[i] != NULL && memcmp(r->slot[i], values, (size_t)n * sizeof(uint64_t)) != 0)
        i = (i + 1) & (r->cap - 1);
    return &r->slot[i];
}

static int grow(struct records *r, int n)
{
    struct records bigger = {calloc(r->cap ? 2 * r->cap : 64, sizeof(uint64_t *)), r->cap ? 2 * r->cap : 64, r->used};
    if (bigger.slot == NULL)
        return -1;
    for (size_t i = 0; i < r->cap; i++)
        if (r->slot[i] != NULL)
            *find(&bigger, r->slot[i], n) = r->slot[i];
    free(r->slot);
    *r = bigger;
    return 0;
}

static struct records *records_of(const struct nfc_table *t)
{
    return t->state || t->inline_values ? NULL : &shared[t - nfc_tables];
}

void *nfc_data_new(const struct nfc_table *t, const uint64_t *values)
{
    if (t->inline_values) {
        uint64_t packed = 0;
        for (int i = 0, shift = 0; i < t->nvalues; shift += t->value_width[i], i++)
            packed |= values[i] << shift;
        return (void *)(uintptr_t)packed;
    }
    struct records *r = records_of(t);
    if (r != NULL && 2 * (r->used + 1) > r->cap && grow(r, t->value_words) != 0)
        return NULL;
    uint64_t **at = r != NULL ? find(r, values, t->value_words) : NULL;
    if (at != NULL && *at != NULL) {
        (*at)[t->value_words]++;
        return *at;
    }
    uint64_t *d = malloc(((size_t)t->value_words + 2) * sizeof(uint64_t));
    if (d == NULL)
        return NULL;
    memcpy(d, values, (size_t)t->value_words * sizeof(uint64_t));
    d[t->value_words + 1] = t->timeout_ns;
    d[t->value_words] = 1;
    if (at != NULL) {
        *at = d;
        r->used++;
    }
    return d;
}

/* Delete from linear probing: the records after the hole that could sit in it move up. */
static void unlink_record(struct records *r, uint64_t **at, int n)
{
    size_t hole = (size_t)(at - r->slot), i = hole;
    r->slot[hole] = NULL;
    r->used--;
    for (i = (i + 1) & (r->cap - 1); r->slot[i] != NULL; i = (i + 1) & (r->cap - 1)) {
        size_t h = home(r->slot[i], n, r->cap);
        if ((i > hole && (h <= hole || h > i)) || (i < hole && h <= hole && h > i)) {
            r->slot[hole] = r->slot[i];
            r->slot[i] = NULL;
            hole = i;
        }
    }
}

void nfc_data_free(const struct nfc_table *t, void *d)
{
    if (t->inline_values || d == NULL)
        return;
    struct records *r = records_of(t);
    uint64_t *rec = d;
    if (r != NULL && --rec[t->value_words] > 0)
        return;
    if (r != NULL)
        unlink_record(r, find(r, rec, t->value_words), t->value_words);
    free(rec);
}

void nfc_values_of(const struct nfc_table *t, const void *d, uint64_t *values)
{
    if (!t->inline_values) {
        memcpy(values, d, (size_t)t->value_words * sizeof(uint64_t));
        return;
    }
    uint64_t packed = (uint64_t)(uintptr_t)d;
    for (int i = 0, shift = 0; i < t->nvalues; shift += t->value_width[i], i++)
        values[i] = (packed >> shift) & nfc_mask(t->value_width[i]);
}
