/* nfc server runtime: data-plane state (tables the stages insert into, the CGN's port pools)
 * shared by every forwarding lcore (issue 13, "state on every core").
 *
 * A state table is a lock-free rte_hash (RW_CONCURRENCY_LF): lookups take no lock, so a
 * flow's packets may come in on any lcore.  Its writers (insert, and the removal of an
 * expired entry by the packet that finds it) are the forwarding lcores, one at a time under
 * the table's spinlock; a record (the values, then the expiry and the timeout in ns) is
 * never changed once published except for its expiry, a single word, so a reader sees whole
 * values.  An insert publishes a new record; the record it replaces, or the record and key
 * slot of a removed entry, are freed once every lcore has passed a quiescent state (the
 * retiring lcore frees them itself between bursts, nfc_state_reclaim: it never waits).
 *
 * Included by nfc_rt.h after its table declarations.  Hand-written, shared by every
 * generated program. */
#ifndef NFC_STATE_H
#define NFC_STATE_H

#include <stdint.h>

/* Record v of a state table of n values: v[n] the expiry, v[n + 1] the timeout (ns); in the
 * state that holds alloc_port's ports (`holds_ports`), v[n + 2] the port's slot in its pool,
 * which holds the port until the same expiry. */
static inline uint64_t nfc_state_expiry(const uint64_t *v, unsigned n)
{
    return __atomic_load_n(&v[n], __ATOMIC_RELAXED);
}

/* A hit restarts the entry's idle timer. */
static inline void nfc_state_touch(uint64_t *v, unsigned n)
{
    __atomic_store_n(&v[n], nfc_now_ns() + v[n + 1], __ATOMIC_RELAXED);
}

/* The same for an entry that holds a port: the port is held as long. */
static inline void nfc_state_touch_held(uint64_t *v, unsigned n)
{
    uint64_t until = nfc_now_ns() + v[n + 1];
    __atomic_store_n(&v[n], until, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(uintptr_t)v[n + 2], until, __ATOMIC_RELAXED);
}

/* An expired entry that a lookup found (rec its record): removed if it is still there (out of line). */
void nfc_state_expire(struct nfc_table *t, const uint8_t *key, const void *rec);

/* Lookup of state table t; 1 and *data: the live entry's record.  An expired entry misses
 * and is removed. */
static inline int nfc_state_find(struct nfc_table *t, const uint8_t *key, void **data)
{
    if (rte_hash_lookup_data(t->h, key, data) < 0)
        return 0;
    if (nfc_state_expiry((const uint64_t *)*data, t->value_words) > nfc_now_ns())
        return 1;
    nfc_state_expire(t, key, *data);
    return 0;
}

/* Entry key := the table's value_words `values`, expiring timeout_ns after now (a new record; a
 * record it replaces is retired).  0; -1: no memory for the record.  A full table keeps its
 * entries and the insert is lost, as a full hash table does. */
int nfc_state_insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns);

/* nfc_state_insert into the state that holds ports: the entry holds port `port` of address
 * `addr` until it expires (then alloc_port may give the port out again). */
int nfc_state_insert_held(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns,
                          uint64_t addr, uint64_t port);

/* The lowest port >= 1024 of external address ext_ip that nothing holds (given out by an
 * earlier call and held for ever, unless an entry of the state that holds ports took it and
 * has expired since; the reference semantics, compiler/interp/state.py); 0 when its 64512
 * ports are held or memory runs out. */
uint64_t nfc_alloc_port(uint64_t ext_ip);

/* Free what lcore retired, as far as every lcore has passed a quiescent state since; with
 * `wait` (an lcore that went offline), everything, waiting for the others. */
void nfc_state_reclaim(unsigned lcore, int wait);

#endif
