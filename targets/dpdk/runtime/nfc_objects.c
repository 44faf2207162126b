/* What the control channel does to registers, counters and meters (nfc_objects.h). */
#include <errno.h>
#include <string.h>

#include "nfc_ctl.h"
#include "nfc_objects.h"

uint32_t nfc_object_words(const struct nfc_object *o)
{
    return o->kind == NFC_REGISTER ? 1u : o->kind == NFC_COUNTER ? 2u : 5u;
}

uint32_t nfc_object_record_words(const struct nfc_object *o)
{
    return 1 + nfc_object_words(o) - (o->kind == NFC_METER);
}

int nfc_object_read(const struct nfc_object *o, const uint64_t *idx, uint32_t n, uint64_t *out, uint32_t *bad)
{
    uint32_t w = nfc_object_words(o);
    for (uint32_t r = 0; r < n; r++)
        if (idx[r] >= o->size) {
            *bad = r;
            return NFC_E_OUT_OF_RANGE;
        }
    for (uint32_t r = 0; r < n; r++) {
        uint64_t *to = out + (size_t)r * w, i = idx[r];
        if (o->kind == NFC_REGISTER) {
            to[0] = __atomic_load_n(&((uint64_t *)o->data)[i], __ATOMIC_RELAXED);
        } else if (o->kind == NFC_COUNTER) {
            struct nfc_count *c = &((struct nfc_count *)o->data)[i];
            to[0] = __atomic_load_n(&c->packets, __ATOMIC_RELAXED);
            to[1] = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
        } else {
            struct nfc_meter *m = &((struct nfc_meter *)o->data)[i];
            rte_spinlock_lock(&m->lock);
            to[0] = m->configured;
            to[1] = m->configured ? m->params.cir : 0;
            to[2] = m->configured ? m->params.cbs : 0;
            to[3] = m->configured ? m->params.pir : 0;
            to[4] = m->configured ? m->params.pbs : 0;
            rte_spinlock_unlock(&m->lock);
        }
    }
    return NFC_OK;
}

/* A record rte_meter takes (cir, cbs, pir, pbs): all zero (reset), or rates it can configure. */
static int meter_ok(const uint64_t *v)
{
    if ((v[0] | v[1] | v[2] | v[3]) == 0)
        return 1;
    return v[0] > 0 && v[2] >= v[0] && v[1] > 0 && v[3] > 0 && v[2] < (1ull << 40) && v[1] < (1ull << 40) &&
           v[3] < (1ull << 40);
}

static int record_ok(const struct nfc_object *o, const uint64_t *r)
{
    if (r[0] >= o->size)
        return 0;
    if (o->kind == NFC_REGISTER)
        return o->width >= 64 || r[1] >> o->width == 0;
    return o->kind == NFC_COUNTER || meter_ok(r + 1);
}

static void meter_set(struct nfc_meter *m, const uint64_t *v)
{
    struct rte_meter_trtcm_params prm = {.cir = v[0], .cbs = v[1], .pir = v[2], .pbs = v[3]};
    struct rte_meter_trtcm_profile prof;
    int on = (v[0] | v[1] | v[2] | v[3]) != 0;
    if (on && rte_meter_trtcm_profile_config(&prof, &prm) != 0)
        on = 0; /* meter_ok checked what rte_meter refuses: not reached */
    rte_spinlock_lock(&m->lock);
    if (on) {
        m->params = prm;
        m->profile = prof;
        rte_meter_trtcm_config(&m->m, &m->profile); /* both buckets full, as RFC 2698 starts them */
    }
    __atomic_store_n(&m->configured, (uint32_t)on, __ATOMIC_RELEASE);
    rte_spinlock_unlock(&m->lock);
}

int nfc_object_write(struct nfc_object *o, const uint64_t *rec, uint32_t n, uint32_t *bad)
{
    uint32_t stride = nfc_object_record_words(o);
    for (uint32_t r = 0; r < n; r++)
        if (!record_ok(o, rec + (size_t)r * stride)) {
            *bad = r;
            return NFC_E_OUT_OF_RANGE;
        }
    for (uint32_t r = 0; r < n; r++) {
        const uint64_t *x = rec + (size_t)r * stride;
        if (o->kind == NFC_REGISTER) {
            __atomic_store_n(&((uint64_t *)o->data)[x[0]], x[1], __ATOMIC_RELAXED);
        } else if (o->kind == NFC_COUNTER) {
            struct nfc_count *c = &((struct nfc_count *)o->data)[x[0]];
            __atomic_store_n(&c->packets, x[1], __ATOMIC_RELAXED);
            __atomic_store_n(&c->bytes, x[2], __ATOMIC_RELAXED);
        } else {
            meter_set(&((struct nfc_meter *)o->data)[x[0]], x + 1);
        }
    }
    *bad = n;
    return NFC_OK;
}
