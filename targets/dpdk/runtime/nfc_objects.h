/* Registers, counters and meters of the server's stages (docs/server.md, "Registers, counters
 * and meters"): the arrays the generated nf.c declares for each one its stages use, what the
 * forwarding lcores do to them per packet, and what the control channel reads and writes
 * (OBJ_READ / OBJ_WRITE, docs/control.md).
 *
 * Every operation on an index out of range reads 0 (a meter: green) and changes nothing, as
 * the reference interpreter does.  A counter is shared by the lcores (atomic adds: a per-tunnel
 * counter is hit by whichever lcore has the packet); a meter is one RFC 2698 two-rate
 * three-colour marker per index (DPDK's rte_meter trTCM, colour-blind, bytes), its buckets
 * updated under a spinlock of its own (rte_meter is not safe for two lcores at once), and green
 * until its rates are set. */
#ifndef NFC_OBJECTS_H
#define NFC_OBJECTS_H

#include <stdint.h>

#include <rte_cycles.h>
#include <rte_meter.h>
#include <rte_spinlock.h>

enum nfc_object_kind { NFC_REGISTER = 0, NFC_COUNTER = 1, NFC_METER = 2 };

struct nfc_count {
    uint64_t packets, bytes;
};

struct nfc_meter {
    rte_spinlock_t lock;
    uint32_t configured; /* 0: every packet is green (the rates were never set, or reset) */
    struct rte_meter_trtcm_params params; /* as set: cir, pir in bytes/s, cbs, pbs in bytes */
    struct rte_meter_trtcm_profile profile;
    struct rte_meter_trtcm m;
};

struct nfc_object {
    const char *name, *src;
    int kind;      /* enum nfc_object_kind */
    uint32_t size; /* indices */
    uint32_t width; /* a register's bits */
    void *data;    /* uint64_t[size], struct nfc_count[size] or struct nfc_meter[size] */
};

/* Implemented by the generated nf.c: the objects its stages use */
extern struct nfc_object nfc_objects[];
extern const int nfc_nobjects;

/* c.count(i): true, as the reference has it */
static inline uint64_t nfc_count_add(struct nfc_count *c, uint64_t size, uint64_t i, uint32_t bytes)
{
    if (i < size) {
        __atomic_fetch_add(&c[i].packets, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&c[i].bytes, bytes, __ATOMIC_RELAXED);
    }
    return 1;
}

/* The packet's colour: 0 green, 1 yellow, 2 red (rte_color's values, and nfc's). */
static inline uint64_t nfc_meter_execute(struct nfc_meter *m, uint64_t size, uint64_t i, uint32_t bytes)
{
    if (i >= size || !__atomic_load_n(&m[i].configured, __ATOMIC_ACQUIRE))
        return 0;
    rte_spinlock_lock(&m[i].lock);
    uint64_t colour = m[i].configured
                          ? (uint64_t)rte_meter_trtcm_color_blind_check(&m[i].m, &m[i].profile, rte_get_tsc_cycles(),
                                                                        bytes)
                          : 0;
    rte_spinlock_unlock(&m[i].lock);
    return colour;
}

/* Words per index in an OBJ_READ reply (a register: its value; a counter: packets, bytes; a
 * meter: configured, cir, cbs, pir, pbs) and of an OBJ_WRITE record (its index, then the same
 * words but a meter's `configured`). */
uint32_t nfc_object_words(const struct nfc_object *o);
uint32_t nfc_object_record_words(const struct nfc_object *o);
/* OBJ_READ: the words of indices idx[0..n) into out; NFC_OK or NFC_E_OUT_OF_RANGE (*bad: which). */
int nfc_object_read(const struct nfc_object *o, const uint64_t *idx, uint32_t n, uint64_t *out, uint32_t *bad);
/* OBJ_WRITE of n records (index, then nfc_object_words values): every record is checked first
 * (index in range, a register value within its width, meter rates rte_meter takes: all zero to
 * reset, else cir > 0, pir >= cir, cbs > 0, pbs > 0); one bad record: nothing is written. */
int nfc_object_write(struct nfc_object *o, const uint64_t *rec, uint32_t n, uint32_t *bad);

#endif
