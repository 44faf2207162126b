/* nfc server runtime: ESP with DPDK's crypto and the anti-replay window (nfc_esp.h).
 * Hand-written, shared by every generated program that uses ESP. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_bus_vdev.h>
#include <rte_cryptodev.h>
#include <rte_hash.h>
#include <rte_lcore.h>
#include <rte_spinlock.h>

#include "nfc_esp.h"

static uint8_t dev;
static struct rte_mempool *session_pool;
static struct rte_hash *sessions;   /* (key, direction) -> session; lock-free readers */
static struct rte_hash *windows;    /* SA number -> its window; lock-free readers */
static rte_spinlock_t writer = RTE_SPINLOCK_INITIALIZER; /* adds to any of the hashes, from any lcore */
static uint8_t cbc_dev;             /* AES-CBC + HMAC-SHA1: a crypto_aesni_mb */
static struct rte_mempool *cbc_pool;
static struct rte_hash *cbc_sessions; /* (key, authentication key, kind) -> session */

struct cbc_key {
    uint8_t key[16];
    uint8_t auth[20];
    uint8_t kind; /* enum cbc_kind */
    uint8_t pad[3];
};

/* encrypt (the IV's block too) + MAC; check + decrypt; check alone; decrypt alone */
enum cbc_kind { CBC_SEAL, CBC_OPEN, CBC_VERIFY, CBC_DECRYPT, CBC_KINDS };

static void forget_ahead(const struct nfc_pkt *p); /* a decryption made ahead for p holds no more */

struct session_key {
    uint8_t key[16];
    uint8_t decrypt;
    uint8_t esn; /* the AAD is 12 bytes, not 8 */
    uint8_t pad[2];
};

struct window {
    rte_spinlock_t lock;
    uint64_t top;    /* the highest sequence number accepted */
    uint64_t bitmap; /* bit i: top - i was seen */
};

static int fail(const char *what)
{
    fprintf(stderr, "nfc: ESP: %s\n", what);
    return -1;
}

static struct rte_hash *hash_of(const char *name, uint32_t entries, uint32_t key_len)
{
    return nfc_hash_new(name, entries, key_len, RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF);
}

/* Device d configured with one queue pair and started, its sessions from *pool (made here). */
static int start_dev(uint8_t d, const char *pool_name, uint32_t sessions, struct rte_mempool **pool)
{
    struct rte_cryptodev_info info;
    rte_cryptodev_info_get(d, &info);
    if (!(info.feature_flags & RTE_CRYPTODEV_FF_SYM_CPU_CRYPTO))
        return fail("the crypto device has no CPU-crypto path (use crypto_aesni_gcm or crypto_aesni_mb)");
    int socket = (int)rte_socket_id();
    *pool = rte_cryptodev_sym_session_pool_create(pool_name, sessions,
                                                  rte_cryptodev_sym_get_private_session_size(d), 0, 0, socket);
    struct rte_cryptodev_config conf = {.socket_id = socket, .nb_queue_pairs = 1};
    struct rte_cryptodev_qp_conf qp = {.nb_descriptors = 128, .mp_session = *pool};
    if (*pool == NULL || rte_cryptodev_configure(d, &conf) != 0 || rte_cryptodev_queue_pair_setup(d, 0, &qp, socket) != 0 ||
        rte_cryptodev_start(d) != 0)
        return fail("cannot set up the crypto device");
    return 0;
}

/* AES-CBC + HMAC-SHA1: the first crypto_aesni_mb given, else one made here (sharing the
 * AES-GCM device's set-up when that is the one). */
static int cbc_init(int gcm_started)
{
    int found = -1;
    for (uint8_t d = 0; d < rte_cryptodev_count() && found < 0; d++) {
        struct rte_cryptodev_info info;
        rte_cryptodev_info_get(d, &info);
        if (strcmp(info.driver_name, "crypto_aesni_mb") == 0)
            found = d;
    }
    if (found < 0 && rte_vdev_init("crypto_aesni_mb_nfc", NULL) == 0)
        found = rte_cryptodev_get_dev_id("crypto_aesni_mb_nfc");
    if (found < 0)
        return fail("AES-CBC + HMAC-SHA1 needs crypto_aesni_mb, which was not given and could not be made");
    cbc_dev = (uint8_t)found;
    if (gcm_started && cbc_dev == dev)
        cbc_pool = session_pool;
    else if (start_dev(cbc_dev, "nfc_esp_cbc_sessions", NFC_ESP_SESSIONS, &cbc_pool) != 0)
        return -1;
    cbc_sessions = hash_of("nfc_esp_cbc_keys", NFC_ESP_SESSIONS, sizeof(struct cbc_key));
    return cbc_sessions == NULL ? fail("no memory for the SA tables") : 0;
}

int nfc_esp_init(void)
{
    int gcm = nfc_uses_esp & NFC_ESP_GCM;
    if (gcm) {
        if (rte_cryptodev_count() == 0 && rte_vdev_init("crypto_aesni_gcm_nfc", NULL) != 0)
            return fail("no crypto device: none given with --vdev, and crypto_aesni_gcm could not be made");
        /* room for the AES-CBC sessions too, in case that suite shares this device (cbc_init) */
        uint32_t n = nfc_uses_esp & NFC_ESP_CBC ? 2 * NFC_ESP_SESSIONS : NFC_ESP_SESSIONS;
        if (start_dev(dev, "nfc_esp_sessions", n, &session_pool) != 0)
            return -1;
        sessions = hash_of("nfc_esp_keys", NFC_ESP_SESSIONS, sizeof(struct session_key));
        if (sessions == NULL)
            return fail("no memory for the SA tables");
    }
    if ((nfc_uses_esp & NFC_ESP_CBC) && cbc_init(gcm) != 0)
        return -1;
    windows = hash_of("nfc_esp_windows", NFC_REPLAY_SAS, sizeof(uint32_t));
    return windows == NULL ? fail("no memory for the SA tables") : 0;
}

void nfc_esp_stop(void)
{
    if (nfc_uses_esp & NFC_ESP_GCM)
        rte_cryptodev_stop(dev);
    if ((nfc_uses_esp & NFC_ESP_CBC) && !((nfc_uses_esp & NFC_ESP_GCM) && cbc_dev == dev))
        rte_cryptodev_stop(cbc_dev);
}

uint8_t *nfc_esp_buf(struct nfc_pkt *p)
{
    if (p->esp_buf == NULL)
        p->esp_buf = malloc(NFC_ESP_ROOM);
    return p->esp_buf;
}

/* The session of an AES-GCM-128 key in one direction, made on first use; NULL: no memory. */
static void *session(nfc_u128 key, int decrypt, int esn)
{
    /* the lcore's last session per direction: a run of packets of one SA skips the hash (a
     * session is never freed, so the pointer stays good) */
    static __thread __attribute__((tls_model("initial-exec"))) struct {
        nfc_u128 key;
        int esn;
        void *s;
    } last[2]; /* (initial-exec: no __tls_get_addr call per packet) */
    if (last[decrypt].s != NULL && last[decrypt].key == key && last[decrypt].esn == esn)
        return last[decrypt].s;
    struct session_key k = {.decrypt = (uint8_t)decrypt, .esn = (uint8_t)esn};
    for (int i = 0; i < 16; i++)
        k.key[i] = (uint8_t)(key >> (8 * (15 - i)));
    void *s = NULL;
    if (rte_hash_lookup_data(sessions, &k, &s) >= 0) {
        last[decrypt].key = key;
        last[decrypt].esn = esn;
        last[decrypt].s = s;
        return s;
    }
    rte_spinlock_lock(&writer);
    if (rte_hash_lookup_data(sessions, &k, &s) < 0) {
        struct rte_crypto_sym_xform x = {
            .type = RTE_CRYPTO_SYM_XFORM_AEAD,
            .aead = {
                .op = decrypt ? RTE_CRYPTO_AEAD_OP_DECRYPT : RTE_CRYPTO_AEAD_OP_ENCRYPT,
                .algo = RTE_CRYPTO_AEAD_AES_GCM,
                .key = {.data = k.key, .length = 16},
                .iv = {.offset = 0, .length = 12},
                .digest_length = NFC_ESP_ICV,
                .aad_length = esn ? 12 : 8,
            },
        };
        s = rte_cryptodev_sym_session_create(dev, &x, session_pool);
        if (s != NULL && rte_hash_add_key_data(sessions, &k, s) < 0) {
            rte_cryptodev_sym_session_free(dev, s);
            s = NULL;
        }
    }
    rte_spinlock_unlock(&writer);
    return s;
}

/* One AES-GCM operation: data[0, len) in place, with its nonce (salt . IV) and AAD; the tag
 * at icv (written, or checked).  p: the packet an encryption queued for the burst belongs to. */
struct gcm_job {
    void *sess;
    uint8_t *data;
    uint32_t len;
    uint8_t nonce[12];
    uint8_t aad[12];
    uint8_t *icv;
    struct nfc_pkt *p;
};

static void job_of(struct gcm_job *j, void *sess, uint8_t *data, uint32_t len, const uint8_t *iv, uint32_t salt,
                   const uint8_t *aad, uint8_t *icv)
{
    j->sess = sess;
    j->data = data;
    j->len = len;
    j->nonce[0] = (uint8_t)(salt >> 24);
    j->nonce[1] = (uint8_t)(salt >> 16);
    j->nonce[2] = (uint8_t)(salt >> 8);
    j->nonce[3] = (uint8_t)salt;
    memcpy(j->nonce + 4, iv, NFC_ESP_IV);
    memcpy(j->aad, aad, sizeof j->aad);
    j->icv = icv;
}

/* jobs[0..n), all of one session, in one CPU-crypto call; ok[i]: job i done (its tag verified). */
static void gcm_run(struct gcm_job *jobs, uint32_t n, int *ok)
{
    struct rte_crypto_vec seg[NFC_ESP_BATCH];
    struct rte_crypto_sgl sgl[NFC_ESP_BATCH];
    struct rte_crypto_va_iova_ptr iv[NFC_ESP_BATCH], digest[NFC_ESP_BATCH], aad[NFC_ESP_BATCH];
    int32_t status[NFC_ESP_BATCH];
    for (uint32_t i = 0; i < n; i++) {
        seg[i] = (struct rte_crypto_vec){.base = jobs[i].data, .len = jobs[i].len, .tot_len = jobs[i].len};
        sgl[i] = (struct rte_crypto_sgl){.vec = &seg[i], .num = 1};
        iv[i].va = jobs[i].nonce;
        digest[i].va = jobs[i].icv;
        aad[i].va = jobs[i].aad;
        status[i] = -1;
    }
    struct rte_crypto_sym_vec vec = {.num = n, .src_sgl = sgl, .iv = iv, .digest = digest, .aad = aad,
                                     .status = status};
    union rte_crypto_sym_ofs ofs = {.raw = 0};
    rte_cryptodev_sym_cpu_crypto_process(dev, jobs[0].sess, ofs, &vec);
    for (uint32_t i = 0; i < n; i++)
        ok[i] = status[i] == 0;
}

/* AES-GCM over data[0, len) in place, at once; 1: done (and the tag verified). */
static int gcm(void *sess, uint8_t *data, uint32_t len, const uint8_t *iv, uint32_t salt, const uint8_t *aad,
               uint8_t *icv)
{
    struct gcm_job j;
    int ok = 0;
    job_of(&j, sess, data, len, iv, salt, aad, icv);
    gcm_run(&j, 1, &ok);
    return ok;
}

/* An AES-CBC + HMAC-SHA1 encryption: the ESP header at h, the IV's block behind it, then the
 * padded plaintext (len bytes) and the ICV's place. */
struct cbc_job {
    void *seal;
    uint8_t *h;
    uint32_t len;
    struct nfc_pkt *p;
};

/* The lcore's encryptions queued since nfc_esp_batch_begin (on: batching). */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    int on;
    uint32_t n, ncbc;
    struct gcm_job job[NFC_ESP_BATCH];
    struct cbc_job cbc[NFC_ESP_BATCH];
} batch;

static void cbc_seal_run(struct cbc_job *jobs, uint32_t n, int *ok);

void nfc_esp_batch_begin(void)
{
#ifndef NFC_ESP_PER_PACKET /* bench/bench_esp.py's baseline: every encryption at once */
    batch.on = 1;
#endif
    batch.n = 0;
    batch.ncbc = 0;
}

/* Run the queued encryptions: one call per run of one session's jobs (two for AES-CBC: the
 * IVs, then the encryptions and MACs). */
static void batch_flush(void)
{
    int ok[NFC_ESP_BATCH];
    for (uint32_t i = 0, j; i < batch.ncbc; i = j) {
        for (j = i + 1; j < batch.ncbc && batch.cbc[j].seal == batch.cbc[i].seal; j++)
            ;
        cbc_seal_run(&batch.cbc[i], j - i, ok);
        for (uint32_t k = i; k < j; k++) {
            batch.cbc[k].p->esp_pending = 0;
            batch.cbc[k].p->esp_failed |= !ok[k - i];
        }
    }
    batch.ncbc = 0;
    for (uint32_t i = 0, j; i < batch.n; i = j) {
        for (j = i + 1; j < batch.n && batch.job[j].sess == batch.job[i].sess; j++)
            ;
        gcm_run(&batch.job[i], j - i, ok);
        for (uint32_t k = i; k < j; k++) {
            batch.job[k].p->esp_pending = 0;
            batch.job[k].p->esp_failed |= !ok[k - i];
        }
    }
    batch.n = 0;
}

void nfc_esp_batch_end(void)
{
    batch_flush();
    batch.on = 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* p's payload lies in its mbuf, which it may change (nfc_burst), with `before` bytes free in
 * front of `from` and `after` behind the payload's end. */
static int changeable(const struct nfc_pkt *p, const uint8_t *from, uint32_t before, uint32_t after)
{
    return p->buf_start != NULL && from >= p->buf_start + before &&
           p->payload + p->payload_len + after <= p->buf_end && p->payload >= p->buf_start;
}

/* The plaintext of an encryption laid out: every valid header after instance `esp` and the
 * payload one after the other at buf + iv, with `lead` bytes free before buf and `tail` behind
 * the plaintext; in place when they lie so in p's mbuf with that room (headers that were in
 * front move to p->store), else gathered in p's ESP buffer.  buf (where the IV goes) and
 * *len (the plaintext's bytes), those headers invalid; NULL: no buffer, or too big for it. */
static inline __attribute__((always_inline)) uint8_t *
lay_out(struct nfc_pkt *p, int esp, uint32_t lead, uint32_t iv, uint32_t tail, uint32_t *len_out)
{
    /* the headers after esp, where they are: one after the other up to the payload? */
    const uint8_t *first = p->payload;
    int together = 1;
    uint32_t len = p->payload_len;
    for (int k = nfc_ninst - 1; k > esp; k--)
        if (p->valid[k]) {
            first -= nfc_inst_bytes[k];
            together &= p->hdr[k] == first;
            len += nfc_inst_bytes[k];
        }
    uint8_t *buf;
    if (together && changeable(p, first, lead + iv, tail)) {
        buf = (uint8_t *)(uintptr_t)first - iv;
        for (int k = 0; k <= esp; k++) /* a header the IV (or the lead) would overwrite keeps its bytes aside */
            if (p->valid[k] && p->hdr[k] < first && p->hdr[k] + nfc_inst_bytes[k] > buf - lead) {
                memcpy(p->store[k], p->hdr[k], nfc_inst_bytes[k]);
                p->hdr[k] = p->store[k];
            }
    } else {
        uint8_t *room = nfc_esp_buf(p);
        if (room == NULL || lead + iv + len + tail > NFC_ESP_ROOM)
            return NULL;
        forget_ahead(p);
        buf = room + lead;
        /* the payload first, to its place behind the headers: it may be in the buffer already
         * (a payload decrypted there), where the headers would overwrite it */
        memmove(buf + iv + (len - p->payload_len), p->payload, p->payload_len);
        uint32_t at = iv;
        for (int k = esp + 1; k < nfc_ninst; k++)
            if (p->valid[k]) {
                memcpy(buf + at, p->hdr[k], nfc_inst_bytes[k]);
                at += nfc_inst_bytes[k];
            }
    }
    for (int k = esp + 1; k < nfc_ninst; k++)
        p->valid[k] = 0;
    *len_out = len;
    return buf;
}

/* RFC 4303 §2.4-2.6: the default padding to `align` bytes, the pad length and the next header
 * (from the first byte's IP version) behind the plaintext pt[0, len); the new length. */
static uint32_t trailer(uint8_t *pt, uint32_t len, uint32_t align)
{
    uint8_t version = len > 0 ? pt[0] >> 4 : 0;
    uint8_t next = len == 0 ? 59 : version == 6 ? 41 : 4; /* RFC 4303 §2.6: IPv6, no next header, IPv4 */
    uint32_t padlen = (align - (len + 2) % align) % align;
    for (uint32_t i = 1; i <= padlen; i++)
        pt[len++] = (uint8_t)i;
    pt[len++] = (uint8_t)padlen;
    pt[len++] = next;
    return len;
}

/* The inner packet's length of a decrypted plaintext pt[0, len) whose trailer holds the
 * default padding (RFC 4303 §2.4: 1, 2, 3, ...); -1: malformed. */
static int64_t untrailer(const uint8_t *pt, uint32_t len)
{
    if (len < 2)
        return -1;
    uint32_t padlen = pt[len - 2];
    if (padlen + 2 > len)
        return -1;
    for (uint32_t i = 1; i <= padlen; i++)
        if (pt[len - 2 - padlen + i - 1] != (uint8_t)i)
            return -1;
    return (int64_t)(len - 2 - padlen);
}

uint32_t nfc_esp_encrypt(struct nfc_pkt *p, int esp, uint32_t spi, uint64_t seq, nfc_u128 key, uint32_t salt, int esn)
{
    if (p->esp_pending) /* its payload is a queued encryption's: done first (an ESP in ESP) */
        batch_flush();
    uint32_t len;
    uint8_t *buf = lay_out(p, esp, 0, NFC_ESP_IV, 3 + 2 + NFC_ESP_ICV, &len);
    if (buf == NULL)
        return 0;
    uint32_t sealed = nfc_esp_seal(buf, len, spi, seq, key, salt, esn, p);
    p->payload = buf;
    p->payload_len = sealed;
    return sealed;
}

uint32_t nfc_esp_seal(uint8_t *buf, uint32_t len, uint32_t spi, uint64_t seq, nfc_u128 key, uint32_t salt, int esn,
                      struct nfc_pkt *p)
{
    void *sess = session(key, 0, esn);
    if (sess == NULL)
        return 0;
    uint8_t *pt = buf + NFC_ESP_IV;
    len = trailer(pt, len, 4); /* RFC 4303 §2.4: 4-byte alignment */
    uint8_t aad[12];
    put32(aad, spi);
    put32(aad + 4, (uint32_t)(seq >> (esn ? 32 : 0)));
    put32(aad + 8, (uint32_t)seq);
    put32(buf, (uint32_t)(seq >> 32)); /* IV: the sequence number as 64 bits */
    put32(buf + 4, (uint32_t)seq);
    if (p != NULL && batch.on) { /* queued: the burst's encryptions run together (nfc_esp_batch_end) */
        if (batch.n == NFC_ESP_BATCH)
            batch_flush();
        job_of(&batch.job[batch.n++], sess, pt, len, buf, salt, aad, pt + len);
        batch.job[batch.n - 1].p = p;
        p->esp_pending = 1;
    } else if (!gcm(sess, pt, len, buf, salt, aad, pt + len)) {
        return 0;
    }
    return NFC_ESP_IV + len + NFC_ESP_ICV;
}

int nfc_esp_decrypt(struct nfc_pkt *p, int outer, int esp, nfc_u128 key, uint64_t salt, int esn, uint64_t seq_high,
                    int in_place)
{
    if (p->esp_pending) /* its payload is a queued encryption's: done first */
        batch_flush();
    uint32_t n = p->payload_len;
    if (!p->valid[esp] || n < NFC_ESP_IV + NFC_ESP_ICV + 2 || n > NFC_ESP_ROOM)
        return 0;
    void *sess = session(key, 1, esn);
    forget_ahead(p); /* it may write p's ESP buffer */
    uint8_t *buf = in_place && changeable(p, p->payload, 0, 0) ? (uint8_t *)(uintptr_t)p->payload : nfc_esp_buf(p);
    if (sess == NULL || buf == NULL)
        return 0;
    uint32_t len = n - NFC_ESP_IV - NFC_ESP_ICV;
    if (buf != p->payload)
        memmove(buf, p->payload, n); /* a failed ICV leaves the payload as it was (it may be in buf) */
    uint8_t tag[NFC_ESP_ICV], aad[12];
    memcpy(tag, buf + NFC_ESP_IV + len, NFC_ESP_ICV);
    memcpy(aad, p->hdr[esp], 4); /* SPI, (the high 32 bits,) the sequence number */
    put32(aad + 4, (uint32_t)seq_high);
    memcpy(aad + (esn ? 8 : 4), p->hdr[esp] + 4, 4);
    if (!gcm(sess, buf + NFC_ESP_IV, len, buf, (uint32_t)salt, aad, tag))
        return 0;
    const uint8_t *pt = buf + NFC_ESP_IV;
    int64_t inner = untrailer(pt, len);
    if (inner < 0)
        return 0;
    p->payload = pt;
    p->payload_len = (uint32_t)inner;
    p->valid[outer] = 0;
    p->valid[esp] = 0;
    return 1;
}

/* ---- AES-CBC-128 + HMAC-SHA1-96 ------------------------------------------------------------- */

/* The session of one kind for an SA's keys, made on first use; NULL: no memory. */
static void *cbc_session(nfc_u128 key, uint64_t auth_hi, nfc_u128 auth_lo, enum cbc_kind kind)
{
    static __thread __attribute__((tls_model("initial-exec"))) struct {
        nfc_u128 key, lo;
        uint64_t hi;
        void *s;
    } last[CBC_KINDS]; /* the lcore's last session per kind (never freed: the pointer stays good) */
    if (last[kind].s != NULL && last[kind].key == key && last[kind].hi == auth_hi && last[kind].lo == auth_lo)
        return last[kind].s;
    struct cbc_key k = {.kind = (uint8_t)kind};
    for (int i = 0; i < 16; i++) {
        k.key[i] = (uint8_t)(key >> (8 * (15 - i)));
        k.auth[4 + i] = (uint8_t)(auth_lo >> (8 * (15 - i)));
    }
    for (int i = 0; i < 4; i++)
        k.auth[i] = (uint8_t)(auth_hi >> (8 * (3 - i)));
    void *s = NULL;
    if (rte_hash_lookup_data(cbc_sessions, &k, &s) < 0) {
        rte_spinlock_lock(&writer);
        if (rte_hash_lookup_data(cbc_sessions, &k, &s) < 0) {
            int seal = kind == CBC_SEAL;
            struct rte_crypto_sym_xform auth = {
                .type = RTE_CRYPTO_SYM_XFORM_AUTH,
                .auth = {.op = seal ? RTE_CRYPTO_AUTH_OP_GENERATE : RTE_CRYPTO_AUTH_OP_VERIFY,
                         .algo = RTE_CRYPTO_AUTH_SHA1_HMAC, .key = {.data = k.auth, .length = 20},
                         .digest_length = NFC_ESP_CBC_ICV}};
            struct rte_crypto_sym_xform cipher = {
                .type = RTE_CRYPTO_SYM_XFORM_CIPHER,
                .next = kind == CBC_SEAL ? &auth : NULL, /* encrypt, then the MAC over the ciphertext */
                .cipher = {.op = seal ? RTE_CRYPTO_CIPHER_OP_ENCRYPT : RTE_CRYPTO_CIPHER_OP_DECRYPT,
                           .algo = RTE_CRYPTO_CIPHER_AES_CBC, .key = {.data = k.key, .length = 16},
                           .iv = {.offset = 0, .length = NFC_ESP_CBC_IV}}};
            auth.next = kind == CBC_OPEN ? &cipher : NULL; /* the MAC over the ciphertext, then decrypt */
            struct rte_crypto_sym_xform *first = kind == CBC_OPEN || kind == CBC_VERIFY ? &auth : &cipher;
            s = rte_cryptodev_sym_session_create(cbc_dev, first, cbc_pool);
            if (s != NULL && rte_hash_add_key_data(cbc_sessions, &k, s) < 0) {
                rte_cryptodev_sym_session_free(cbc_dev, s);
                s = NULL;
            }
        }
        rte_spinlock_unlock(&writer);
    }
    explicit_bzero(&k, sizeof k); /* no copy of the keys left on the stack (a memset would be optimised away) */
    if (s != NULL) {
        last[kind].key = key;
        last[kind].hi = auth_hi;
        last[kind].lo = auth_lo;
        last[kind].s = s;
    }
    return s;
}

/* One CPU-crypto operation of session sess over data[0, len): the cipher from cipher_head
 * (with its IV at iv), the MAC from auth_head (its digest at digest). */
struct cbc_op {
    uint8_t *data;
    uint32_t len;
    const uint8_t *iv;
    uint8_t *digest;
};

/* ops[0..n) of session sess in one call (the multi-buffer library fills its lanes with them);
 * ok[i]: op i done (its MAC verified). */
static void cbc_run_n(void *sess, struct cbc_op *ops, uint32_t n, uint32_t cipher_head, uint32_t auth_head,
                      int *ok)
{
    struct rte_crypto_vec seg[NFC_ESP_BATCH];
    struct rte_crypto_sgl sgl[NFC_ESP_BATCH];
    struct rte_crypto_va_iova_ptr iv[NFC_ESP_BATCH], digest[NFC_ESP_BATCH], aad[NFC_ESP_BATCH];
    int32_t status[NFC_ESP_BATCH];
    for (uint32_t i = 0; i < n; i++) {
        seg[i] = (struct rte_crypto_vec){.base = ops[i].data, .len = ops[i].len, .tot_len = ops[i].len};
        sgl[i] = (struct rte_crypto_sgl){.vec = &seg[i], .num = 1};
        iv[i].va = (void *)(uintptr_t)ops[i].iv;
        digest[i].va = ops[i].digest;
        aad[i].va = NULL;
        status[i] = -1;
    }
    struct rte_crypto_sym_vec vec = {.num = n, .src_sgl = sgl, .iv = iv, .digest = digest, .aad = aad,
                                     .status = status};
    union rte_crypto_sym_ofs ofs = {.raw = 0};
    ofs.ofs.cipher.head = cipher_head;
    ofs.ofs.auth.head = auth_head;
    rte_cryptodev_sym_cpu_crypto_process(cbc_dev, sess, ofs, &vec);
    for (uint32_t i = 0; i < n; i++)
        ok[i] = status[i] == 0;
}

static int cbc_run(void *sess, uint8_t *data, uint32_t len, uint32_t cipher_head, uint32_t auth_head,
                   const uint8_t *iv, uint8_t *digest)
{
    struct cbc_op op = {data, len, iv, digest};
    int ok = 0;
    cbc_run_n(sess, &op, 1, cipher_head, auth_head, &ok);
    return ok;
}

/* jobs[0..n), all of one SA, in one call: each its nonce block and plaintext encrypted by CBC
 * from a zero IV — the nonce's ciphertext, AES_key(nonce), is the IV, and the rest is exactly
 * the plaintext's CBC from that IV — then the MAC; ok[i]: job i done. */
static void cbc_seal_run(struct cbc_job *jobs, uint32_t n, int *ok)
{
    static const uint8_t zero[NFC_ESP_CBC_IV];
    struct cbc_op ops[NFC_ESP_BATCH];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = 8 + NFC_ESP_CBC_IV + jobs[i].len;
        ops[i] = (struct cbc_op){jobs[i].h, len, zero, jobs[i].h + len};
    }
    cbc_run_n(jobs[0].seal, ops, n, 8, 0, ok);
}

uint32_t nfc_esp_encrypt_cbc(struct nfc_pkt *p, int esp, uint32_t spi, uint64_t seq, nfc_u128 key, uint64_t auth_hi,
                             nfc_u128 auth_lo)
{
    if (p->esp_pending) /* its payload is a queued encryption's: done first (an ESP in ESP) */
        batch_flush();
    void *seal = cbc_session(key, auth_hi, auth_lo, CBC_SEAL);
    uint32_t len;
    /* 8 bytes in front of the IV for the ESP header the MAC covers (the deparser writes the same there) */
    uint8_t *buf = seal != NULL ? lay_out(p, esp, 8, NFC_ESP_CBC_IV, 15 + 2 + NFC_ESP_CBC_ICV, &len)
                                               : NULL;
    if (buf == NULL)
        return 0;
    uint8_t *pt = buf + NFC_ESP_CBC_IV;
    len = trailer(pt, len, 16); /* RFC 3602 §2.4: whole blocks */
    put32(buf, spi); /* the IV's nonce: the IV is AES_key(spi . 0 . seq) (cbc_seal_run) */
    put32(buf + 4, 0);
    put32(buf + 8, (uint32_t)(seq >> 32));
    put32(buf + 12, (uint32_t)seq);
    uint8_t *h = buf - 8;
    put32(h, spi);
    put32(h + 4, (uint32_t)seq);
    struct cbc_job job = {seal, h, len, p};
    if (batch.on) { /* queued: the burst's encryptions run together (nfc_esp_batch_end) */
        if (batch.ncbc == NFC_ESP_BATCH)
            batch_flush();
        batch.cbc[batch.ncbc++] = job;
        p->esp_pending = 1;
    } else {
        int ok = 0;
        cbc_seal_run(&job, 1, &ok);
        if (!ok)
            return 0;
    }
    p->payload = buf;
    p->payload_len = NFC_ESP_CBC_IV + len + NFC_ESP_CBC_ICV;
    return p->payload_len;
}

/* Decryptions ahead: the burst's packets (nfc_esp_burst), and for each a decryption made
 * while an earlier packet of the burst was decrypted (one multi-buffer call for the run of
 * packets with its SPI), in a copy in its ESP buffer: what its own call then takes if nothing
 * it depends on changed (the session, the instances, the ESP header's bytes, the payload). */
struct ahead {
    void *sess; /* NULL: none */
    const uint8_t *payload;
    uint32_t len;
    int outer, esp, ok;
    uint8_t hdr[8];
    int64_t inner; /* the inner packet's bytes at pt; -1: a malformed trailer */
    uint8_t *pt;
};

static __thread __attribute__((tls_model("initial-exec"))) struct {
    struct nfc_pkt *pkt;
    const int *code;
    uint16_t n;
    struct ahead ahead[NFC_ESP_BURST];
} burst;

void nfc_esp_burst(struct nfc_pkt *pkt, const int *code, uint16_t n)
{
    burst.pkt = pkt;
    burst.code = code;
    burst.n = n <= NFC_ESP_BURST ? n : 0;
    for (uint16_t i = 0; i < burst.n; i++)
        burst.ahead[i].sess = NULL;
}

/* The length of a CBC ESP payload of n bytes, if it could be decrypted at all. */
static int cbc_sized(uint32_t n)
{
    return n >= NFC_ESP_CBC_IV + 16 + NFC_ESP_CBC_ICV && (n - NFC_ESP_CBC_IV - NFC_ESP_CBC_ICV) % 16 == 0 &&
           8 + n <= NFC_ESP_ROOM;
}

/* p's decryption made ahead, if it holds for this call: 1 or 0 as the call's; -1: none. */
/* p's decryption made ahead, if any (NULL: none). */
static struct ahead *ahead_of(const struct nfc_pkt *p)
{
    if (burst.pkt == NULL || p < burst.pkt || p >= burst.pkt + burst.n)
        return NULL;
    struct ahead *a = &burst.ahead[p - burst.pkt];
    return a->sess != NULL ? a : NULL;
}

/* Whatever p's decryption made ahead holds no more: its ESP buffer is about to be written. */
static void forget_ahead(const struct nfc_pkt *p)
{
    struct ahead *a = ahead_of(p);
    if (a != NULL)
        a->sess = NULL;
}

static int taken_ahead(struct nfc_pkt *p, int outer, int esp, void *sess)
{
    struct ahead *a = ahead_of(p);
    if (a == NULL)
        return -1;
    /* this call takes it or goes its own way, which may write the ESP buffer: either way, once */
    void *made = a->sess;
    a->sess = NULL;
    if (made != sess || a->outer != outer || a->esp != esp || a->payload != p->payload ||
        a->len != p->payload_len || memcmp(a->hdr, p->hdr[esp], 8) != 0)
        return -1;
    if (!a->ok || a->inner < 0)
        return 0;
    p->payload = a->pt;
    p->payload_len = (uint32_t)a->inner;
    p->valid[outer] = 0;
    p->valid[esp] = 0;
    return 1;
}

/* Up to NFC_ESP_BATCH - 1 packets after p in the burst with p's SPI and a whole CBC payload
 * behind its header, copied into their ESP buffers, as ops (header, IV, ciphertext) from ops[1];
 * how many (their burst indices in at[]). */
static uint32_t gather_ahead(struct nfc_pkt *p, int outer, int esp, struct cbc_op *ops, uint32_t *at)
{
    uint32_t k = 0;
    if (burst.pkt == NULL || p < burst.pkt || (uint32_t)(p - burst.pkt) >= burst.n)
        return 0;
    for (uint32_t j = (uint32_t)(p - burst.pkt) + 1; j < burst.n && k + 1 < NFC_ESP_BATCH; j++) {
        struct nfc_pkt *q = &burst.pkt[j];
        if (burst.code[j] != NFC_CONTINUE || !q->valid[esp] || !q->valid[outer] || q->esp_pending ||
            burst.ahead[j].sess != NULL || q->hdr[esp] + 8 != q->payload || memcmp(q->hdr[esp], p->hdr[esp], 4) != 0 ||
            !cbc_sized(q->payload_len))
            continue;
        uint8_t *room = nfc_esp_buf(q);
        if (room == NULL || (q->payload >= room && q->payload < room + NFC_ESP_ROOM))
            continue;
        uint32_t len = q->payload_len - NFC_ESP_CBC_IV - NFC_ESP_CBC_ICV;
        memcpy(room, q->hdr[esp], 8 + q->payload_len);
        ops[1 + k] = (struct cbc_op){room, 8 + NFC_ESP_CBC_IV + len, room + 8, room + 8 + NFC_ESP_CBC_IV + len};
        at[k++] = j;
    }
    return k;
}

int nfc_esp_decrypt_cbc(struct nfc_pkt *p, int outer, int esp, nfc_u128 key, uint64_t auth_hi, nfc_u128 auth_lo,
                        int in_place)
{
    if (p->esp_pending) /* its payload is a queued encryption's: done first */
        batch_flush();
    uint32_t n = p->payload_len;
    if (!p->valid[esp] || !cbc_sized(n))
        return 0;
    void *open = cbc_session(key, auth_hi, auth_lo, CBC_OPEN);
    uint8_t *room = nfc_esp_buf(p);
    if (open == NULL || room == NULL)
        return 0;
    int made = taken_ahead(p, outer, esp, open);
    if (made >= 0)
        return made;
    /* the header, IV, ciphertext and ICV one after the other where they may be decrypted: in
     * the mbuf when a failure drops (in_place), in the ESP buffer when decrypted there before
     * (an ESP in ESP), else copied there (a failure leaves the payload as it was) */
    int inside = p->payload >= room && p->payload < room + NFC_ESP_ROOM;
    uint8_t *h = (uint8_t *)(uintptr_t)p->hdr[esp];
    if (h + 8 != p->payload || (!inside && !(in_place && changeable(p, p->payload, 0, 0)))) {
        uint8_t head[8];
        memcpy(head, p->hdr[esp], 8);
        memmove(room + 8, p->payload, n); /* it may be in the buffer already (decrypted there) */
        memcpy(room, head, 8);
        h = room;
        if (inside) /* the same bytes, moved */
            p->payload = room + 8;
    }
    uint32_t len = n - NFC_ESP_CBC_IV - NFC_ESP_CBC_ICV;
    uint8_t *ct = h + 8 + NFC_ESP_CBC_IV;
    if (inside && !in_place) {
        /* the payload itself, which must stay as it was if the ICV fails: checked alone first */
        void *verify = cbc_session(key, auth_hi, auth_lo, CBC_VERIFY);
        void *decrypt = cbc_session(key, auth_hi, auth_lo, CBC_DECRYPT);
        uint8_t unused[20];
        if (verify == NULL || decrypt == NULL || !cbc_run(verify, h, 8 + NFC_ESP_CBC_IV + len, 0, 0, h + 8, ct + len) ||
            !cbc_run(decrypt, ct, len, 0, 0, h + 8, unused))
            return 0;
    } else {
        /* one chained call, as ipsec-secgw's: the MAC checked over the ciphertext, which is
         * decrypted in the same pass (a failed check leaves it decrypted where no one reads it:
         * in a copy, or in an mbuf that is dropped); with it the decryptions ahead */
        struct cbc_op ops[NFC_ESP_BATCH];
        uint32_t at[NFC_ESP_BATCH];
        int ok[NFC_ESP_BATCH];
        ops[0] = (struct cbc_op){h, 8 + NFC_ESP_CBC_IV + len, h + 8, ct + len};
        uint32_t k = gather_ahead(p, outer, esp, ops, at);
        cbc_run_n(open, ops, 1 + k, 8 + NFC_ESP_CBC_IV, 0, ok);
        for (uint32_t i = 0; i < k; i++) {
            struct nfc_pkt *q = &burst.pkt[at[i]];
            struct ahead *a = &burst.ahead[at[i]];
            uint8_t *qct = ops[1 + i].data + 8 + NFC_ESP_CBC_IV;
            *a = (struct ahead){.sess = open, .payload = q->payload, .len = q->payload_len, .outer = outer, .esp = esp,
                              .ok = ok[1 + i], .pt = qct,
                              .inner = ok[1 + i] ? untrailer(qct, ops[1 + i].len - 8 - NFC_ESP_CBC_IV) : -1};
            memcpy(a->hdr, q->hdr[esp], 8);
        }
        if (!ok[0])
            return 0;
    }
    int64_t inner = untrailer(ct, len);
    if (inner < 0)
        return 0;
    p->payload = ct;
    p->payload_len = (uint32_t)inner;
    p->valid[outer] = 0;
    p->valid[esp] = 0;
    return 1;
}

/* The window of SA sa, made on first use; NULL: no room for another SA. */
static struct window *window_of(uint32_t sa)
{
    void *w = NULL;
    if (rte_hash_lookup_data(windows, &sa, &w) >= 0)
        return w;
    rte_spinlock_lock(&writer);
    if (rte_hash_lookup_data(windows, &sa, &w) < 0) {
        w = calloc(1, sizeof(struct window));
        if (w != NULL) {
            rte_spinlock_init(&((struct window *)w)->lock);
            if (rte_hash_add_key_data(windows, &sa, w) < 0) {
                free(w);
                w = NULL;
            }
        }
    }
    rte_spinlock_unlock(&writer);
    return w;
}

int nfc_replay_check(uint64_t sa, uint64_t seq)
{
    struct window *w = seq == 0 ? NULL : window_of((uint32_t)sa);
    if (w == NULL)
        return 0;
    int ok = 1;
    rte_spinlock_lock(&w->lock);
    if (seq > w->top) { /* right of the window: it slides */
        uint64_t shift = seq - w->top;
        w->bitmap = shift < 64 ? (w->bitmap << shift) | 1 : 1;
        w->top = seq;
    } else if (w->top - seq >= 64 || ((w->bitmap >> (w->top - seq)) & 1)) { /* too old, or a replay */
        ok = 0;
    } else {
        w->bitmap |= 1ull << (w->top - seq);
    }
    rte_spinlock_unlock(&w->lock);
    return ok;
}

uint32_t nfc_replay_windows(uint32_t *next, uint32_t max, uint64_t *out)
{
    uint32_t n = 0;
    const void *key;
    void *data;
    if (windows == NULL)
        return 0;
    rte_spinlock_lock(&writer); /* no window added meanwhile: rte_hash_iterate is not safe against adds */
    while (n < max && rte_hash_iterate(windows, &key, &data, next) >= 0) {
        struct window *w = data;
        rte_spinlock_lock(&w->lock);
        out[3 * n] = *(const uint32_t *)key;
        out[3 * n + 1] = w->top;
        out[3 * n + 2] = w->bitmap;
        rte_spinlock_unlock(&w->lock);
        n++;
    }
    rte_spinlock_unlock(&writer);
    return n;
}

int nfc_replay_merge(uint32_t sa, uint64_t top, uint64_t bitmap)
{
    struct window *w = windows == NULL ? NULL : window_of(sa);
    if (w == NULL)
        return -1;
    rte_spinlock_lock(&w->lock);
    if (top > w->top) { /* theirs is ahead: ours slides to it */
        uint64_t shift = top - w->top;
        w->bitmap = (shift < 64 ? w->bitmap << shift : 0) | bitmap;
        w->top = top;
    } else if (w->top - top < 64) {
        w->bitmap |= bitmap << (w->top - top);
    }
    rte_spinlock_unlock(&w->lock);
    return 0;
}

uint64_t nfc_esn_high(uint64_t sa, uint64_t seql)
{
    uint32_t key = (uint32_t)sa;
    void *found = NULL;
    uint64_t top = 0;
    if (rte_hash_lookup_data(windows, &key, &found) >= 0) {
        struct window *w = found;
        rte_spinlock_lock(&w->lock);
        top = w->top;
        rte_spinlock_unlock(&w->lock);
    }
    uint64_t th = top >> 32, tl = top & 0xffffffffu, w = 64;
    if (tl >= w - 1) /* case A: the window within one 2^32 subspace */
        return seql >= tl - w + 1 ? th : (th + 1) & 0xffffffffu;
    /* case B: it straddles the boundary; at th = 0 there is no subspace before */
    return th > 0 && seql >= ((tl - w + 1) & 0xffffffffu) ? th - 1 : th;
}
