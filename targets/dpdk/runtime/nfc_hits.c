/* nfc server runtime: per-entry hit counts of switch-cached tables (nfc_hits.h). */
#include <stdlib.h>
#include <string.h>

#include <rte_hash_crc.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

/* The lcores' logs: each written by its lcore alone, published once (release) when made. */
static struct nfc_hit_log *logs[RTE_MAX_LCORE];

struct nfc_hit_log *nfc_hit_log_of_lcore(void)
{
    unsigned lcore = rte_lcore_id();
    if (lcore >= RTE_MAX_LCORE)
        return NULL;
    struct nfc_hit_log *log = aligned_alloc(64, sizeof *log);
    if (log == NULL)
        return NULL;
    log->head = 0;
    __atomic_store_n(&logs[lcore], log, __ATOMIC_RELEASE);
    return log;
}

/* ---- control thread only ------------------------------------------------------------------ */

struct slot {
    uint64_t hits; /* 0: empty */
    uint8_t key[NFC_HITS_KEY];
};

struct counts {
    struct slot *slots; /* NFC_HITS_KEYS, made on the table's first sample */
    uint32_t used;
    uint64_t lost;
};

static struct counts counts[NFC_MAX_TABLES];
static uint64_t tail[RTE_MAX_LCORE]; /* the samples of each log already drained */
static struct nfc_hit_sample seen[NFC_HITS_LOG];
static uint64_t overwritten; /* samples lost in the logs, all tables, since the start */

int nfc_hits_any(void)
{
    for (int t = 0; t < nfc_ntables; t++)
        if (nfc_tables[t].tracked)
            return 1;
    return 0;
}

static void count(const struct nfc_hit_sample *s)
{
    if (s->table >= nfc_ntables || !nfc_tables[s->table].tracked)
        return;
    struct counts *c = &counts[s->table];
    unsigned kb = nfc_tables[s->table].key_bytes;
    if (c->slots == NULL && (c->slots = calloc(NFC_HITS_KEYS, sizeof *c->slots)) == NULL) {
        c->lost++;
        return;
    }
    uint32_t mask = NFC_HITS_KEYS - 1, i = rte_hash_crc(s->key, kb, 0) & mask;
    for (uint32_t probes = 0; probes < NFC_HITS_KEYS; probes++, i = (i + 1) & mask) {
        struct slot *e = &c->slots[i];
        if (e->hits != 0 && memcmp(e->key, s->key, kb) == 0) {
            e->hits++;
            return;
        }
        if (e->hits == 0) {
            if (c->used >= NFC_HITS_KEYS * 3 / 4) /* kept sparse: probes stay short */
                break;
            memcpy(e->key, s->key, kb);
            e->hits = 1;
            c->used++;
            return;
        }
    }
    c->lost++;
}

/* The samples of one log since the last drain; those the lcore may have overwritten while
 * they were copied are lost, not counted. */
static void drain_log(unsigned l, struct nfc_hit_log *log)
{
    uint64_t head = __atomic_load_n(&log->head, __ATOMIC_ACQUIRE), from = tail[l], lost = 0;
    if (head - from > NFC_HITS_LOG) {
        lost += head - from - NFC_HITS_LOG;
        from = head - NFC_HITS_LOG;
    }
    for (uint64_t i = from; i < head; i++)
        seen[i - from] = log->s[i & (NFC_HITS_LOG - 1)];
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    /* While head reads `now`, the writer may be writing sample `now`, into the slot of sample
     * now - LOG: sample i was intact while copied only if i + LOG > now. */
    uint64_t now = __atomic_load_n(&log->head, __ATOMIC_RELAXED), safe = from;
    if (now + 1 - from > NFC_HITS_LOG)
        safe = now + 1 - NFC_HITS_LOG < head ? now + 1 - NFC_HITS_LOG : head;
    lost += safe - from;
    for (uint64_t i = safe; i < head; i++)
        count(&seen[i - from]);
    tail[l] = head;
    overwritten += lost;
}

void nfc_hits_drain(void)
{
    for (unsigned l = 0; l < RTE_MAX_LCORE; l++) {
        struct nfc_hit_log *log = __atomic_load_n(&logs[l], __ATOMIC_ACQUIRE);
        if (log != NULL)
            drain_log(l, log);
    }
}

uint32_t nfc_hits_take(int t, uint64_t *out, uint32_t max, uint64_t *lost, uint64_t *lost_in_logs)
{
    nfc_hits_drain();
    struct counts *c = &counts[t];
    const struct nfc_table *tb = &nfc_tables[t];
    uint32_t n = 0, words = tb->key_words + 1u;
    *lost = c->lost;
    *lost_in_logs = overwritten;
    c->lost = 0;
    if (c->slots == NULL)
        return 0;
    for (uint32_t i = 0; i < NFC_HITS_KEYS; i++) {
        struct slot *e = &c->slots[i];
        if (e->hits == 0)
            continue;
        if (n < max) {
            nfc_key_fields(tb, e->key, out + (size_t)n * words);
            out[(size_t)n * words + tb->key_words] = e->hits;
            n++;
        } else {
            *lost += e->hits;
        }
        e->hits = 0;
    }
    c->used = 0;
    return n;
}
