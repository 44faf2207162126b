/* nfc server runtime: which entries of a switch-cached table the server's lookups hit
 * (issue 14, "hit and idle tracking": the server counts per-entry hits on the miss path).
 *
 * A packet reaches the server's lookup of a cached table because the switch's cache missed,
 * so the keys hit here are the candidates for promotion to the switch.  Each forwarding
 * lcore writes the key of every such hit into its own log (a ring that overwrites its oldest
 * samples; one writer, no lock, no shared cache line); the control thread drains every log
 * about every NFC_HITS_DRAIN_MS into per-table counts (key -> hits) and hands them out, and
 * resets them, on the control channel's HITS request (docs/control.md).  A log that laps
 * before it is drained loses its oldest samples, and a table's counts hold at most
 * NFC_HITS_KEYS keys: what does not fit is counted, not kept.
 *
 * Included by nfc_rt.h after its table declarations.  Hand-written, shared by every
 * generated program. */
#ifndef NFC_HITS_H
#define NFC_HITS_H

#include <stdint.h>
#include <string.h>

#define NFC_HITS_LOG 4096      /* samples per lcore log (a power of two) */
#define NFC_HITS_KEY 32        /* key bytes kept per sample: tables with longer keys are not tracked */
#define NFC_HITS_KEYS 16384    /* distinct keys counted per table between two HITS requests */
#define NFC_HITS_DRAIN_MS 10   /* the control thread drains the logs at least this often */

struct nfc_hit_sample {
    uint8_t key[NFC_HITS_KEY] __attribute__((aligned(8))); /* rte_hash_crc reads it by words */
    uint16_t table;
};

struct nfc_hit_log {
    uint64_t head; /* samples written; the writer's release store, the reader's acquire load */
    struct nfc_hit_sample s[NFC_HITS_LOG];
} __attribute__((aligned(64)));

/* The calling lcore's log, made on its first hit (NULL: no memory, the hit goes unrecorded). */
struct nfc_hit_log *nfc_hit_log_of_lcore(void);

/* A hit of table t (tracked: cached on the switch) with this lookup key. */
static inline void nfc_hit_note(int t, const uint8_t *key, unsigned key_bytes)
{
    static __thread struct nfc_hit_log *log;
    if (__builtin_expect(log == NULL, 0) && (log = nfc_hit_log_of_lcore()) == NULL)
        return;
    uint64_t h = log->head;
    struct nfc_hit_sample *s = &log->s[h & (NFC_HITS_LOG - 1)];
    s->table = (uint16_t)t;
    memcpy(s->key, key, key_bytes < NFC_HITS_KEY ? key_bytes : NFC_HITS_KEY);
    __atomic_store_n(&log->head, h + 1, __ATOMIC_RELEASE);
}

/* Control thread: move what the lcores logged since the last drain into the counts. */
void nfc_hits_drain(void);

/* Control thread: table t's counts as records of (key fields..., hits) into out (room for
 * max records of key_words + 1 words), then forgotten.  *lost: its hits not kept since the last
 * take (no room for another key, or for another record); *lost_in_logs: samples of every
 * table overwritten in a log before a drain, since the start.  The number of records. */
uint32_t nfc_hits_take(int t, uint64_t *out, uint32_t max, uint64_t *lost, uint64_t *lost_in_logs);

/* Any table of this program tracked (so the control thread drains). */
int nfc_hits_any(void);

#endif
