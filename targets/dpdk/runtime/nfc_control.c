/* nfc server runtime: the control channel (protocol in nfc_ctl.h and docs/control.md), served
 * by one control thread on a UNIX socket to up to NFC_CTL_MAX_CLIENTS clients.  The thread is
 * the tables' only writer while the forwarding lcores run, and it never waits for a client:
 * every socket is non-blocking, a request is read as its bytes arrive and served once whole,
 * and its reply is written as the client reads it.  A client is not read from while its
 * reply is unsent (one reply in flight each; a DUMP reply is a page of at most
 * NFC_CTL_MAX_PAGE bytes, copied out of the table; a DUMP of data-plane state waits for its
 * copy without holding up anyone), and a client that takes longer than --control-timeout-ms
 * of the thread's time to send a request or to read a reply is closed.  Only peers whose
 * credentials (SO_PEERCRED) are allowed are served.  Hand-written, shared by every generated
 * program. */
#define _GNU_SOURCE /* accept4, struct ucred */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <rte_hash.h>
#include <rte_malloc.h>
#include <rte_lcore.h>

#include "nfc_ctl.h"
#include "nfc_esp.h"
#include "nfc_rt.h"

#define MAX_ALLOW 16        /* --control-allow-uid flags */
#define MAX_LOGGED 8        /* refusals reported on stderr (a full stderr pipe would block the thread) */
#define MAX_ACCEPTS 128     /* connections taken per round of poll */
#define FD_PAUSE_US 100000  /* out of descriptors and none spare: the socket is not polled for so long */
#define COPY_POLL_US 1000   /* a DUMP waits for its copy: poll at least this often */

/* the command line (nfc_control_arg) */
static const char *sock_arg, *group_arg;
static uid_t allow[MAX_ALLOW];
static int nallow, allow_given; /* allow_given: --control-allow-uid named them */
static uint64_t timeout_ms = NFC_CTL_TIMEOUT_MS;

static gid_t group; /* --control-group's */
static int listen_fd = -1;
static int spare_fd = -1; /* kept open to answer a connection when descriptors run out */
static volatile int stopping;
static int tracking; /* a table's hits are sampled: drain the logs (control thread) */
static pthread_t thread;
static char sock_path[108];
static struct stat sock_file; /* the socket file this program bound: only it is unlinked at the end */

/* One connection: the request being read (header, then body) and the reply being written. */
struct client {
    int fd;
    struct nfc_ctl_req q;
    uint64_t *body;    /* q.length bytes, once the header is in */
    size_t got;        /* bytes of the request read */
    uint8_t *out;      /* the reply, header and body; NULL: none */
    size_t out_len, sent;
    int close_after;   /* close once the reply is out (BAD_REQUEST) */
    uint64_t deadline; /* clock_us() by which the request or reply under way is done; 0: idle */
    struct nfc_state_copy *copy; /* a DUMP of data-plane state waiting for its copy ... */
    uint64_t *page;              /* ... into this reply body */
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Time spent serving requests (and copying state), which no client's deadline counts: a
 * client cannot send or read while the thread serves another. */
static uint64_t served_us;

/* The clock of the clients' deadlines: the thread's time, less what it spent serving. */
static uint64_t clock_us(void)
{
    return now_us() - served_us;
}

/* Queue the reply to c's request (written as c reads it); no memory: c is closed. */
static void reply(struct client *c, uint8_t status, uint32_t index, const void *body, uint32_t len)
{
    struct nfc_ctl_rep r;
    memcpy(r.magic, NFC_CTL_REP_MAGIC, 4);
    r.version = NFC_CTL_VERSION;
    r.status = status;
    r.op = c->q.op;
    r.index = index;
    r.length = len;
    c->out = malloc(sizeof r + len);
    if (c->out == NULL) {
        c->close_after = 1;
        return;
    }
    memcpy(c->out, &r, sizeof r);
    if (len)
        memcpy(c->out + sizeof r, body, len);
    c->out_len = sizeof r + len;
    c->sent = 0;
}

static void fail(struct client *c, uint8_t status, uint32_t index, const char *why)
{
    reply(c, status, index, why, (uint32_t)strlen(why));
}

/* A growing text buffer for the JSON replies. */
struct text {
    char *s;
    size_t n, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = t->s == NULL ? -1 : vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        char *s = realloc(t->s, cap);
        if (s == NULL)
            return;
        t->s = s;
        t->cap = cap;
    }
}

static void hello(struct text *t)
{
    put(t, "{\"version\": %d, \"program\": \"%s\", \"tables\": [", NFC_CTL_VERSION, nfc_program);
    for (int i = 0; i < nfc_ntables; i++) {
        const struct nfc_table *tb = &nfc_tables[i];
        static const char *kinds[] = {"exact", "lpm", "ternary", "range"};
        put(t, "%s{\"name\": \"%s\", \"src\": \"%s\", \"size\": %u, \"capacity\": %u, \"state\": %d, \"lpm\": %d, "
               "\"tracked\": %d, \"acl\": %d, \"match\": [", i ? ", " : "", tb->name, tb->src, tb->size,
            tb->cap, tb->state, tb->lpm, tb->tracked, tb->acl);
        for (int k = 0; k < tb->nkeys; k++)
            put(t, "%s\"%s\"", k ? ", " : "", kinds[tb->match[k] & 3]);
        put(t, "], \"keys\": [");
        for (int k = 0; k < tb->nkeys; k++)
            put(t, "%s%u", k ? ", " : "", tb->key_width[k]);
        put(t, "], \"values\": [");
        for (int k = 0; k < tb->nvalues; k++)
            put(t, "%s%u", k ? ", " : "", tb->value_width[k]);
        put(t, "]}");
    }
    static const char *kinds[] = {"register", "counter", "meter"};
    put(t, "], \"objects\": [");
    for (int i = 0; i < nfc_nobjects; i++) {
        const struct nfc_object *o = &nfc_objects[i];
        put(t, "%s{\"name\": \"%s\", \"src\": \"%s\", \"kind\": \"%s\", \"size\": %u, \"width\": %u}", i ? ", " : "",
            o->name, o->src, kinds[o->kind], o->size, o->width);
    }
    put(t, "]}");
}

/* The nonzero counts of codes [from, to) as JSON members; 1: none. */
static int by_reason(struct text *t, const struct nfc_stats *sum, int from, int to)
{
    int first = 1;
    for (int i = from; i < to; i++) {
        if (sum->drops[i] == 0)
            continue;
        put(t, "%s\"%s\": %" PRIu64, first ? "" : ", ", i == 0 ? "server_no_buffer" : nfc_reason(i), sum->drops[i]);
        first = 0;
    }
    return first;
}

static void nfc_counters_text(struct text *t)
{
    struct nfc_stats sum;
    memset(&sum, 0, sizeof sum);
    for (int l = 0; l < RTE_MAX_LCORE; l++) {
        sum.forwarded += nfc_stats[l].forwarded;
        sum.no_port += nfc_stats[l].no_port;
        for (int i = 0; i < 256; i++)
            sum.drops[i] += nfc_stats[l].drops[i];
        for (int i = 0; i < NFC_MAX_TABLES; i++) {
            sum.hits[i] += nfc_stats[l].hits[i];
            sum.misses[i] += nfc_stats[l].misses[i];
        }
    }
    size_t heap_bytes = 0; /* the DPDK heap of every socket: the tables' rte_hash, the mbuf pools... */
    for (unsigned i = 0; i < rte_socket_count(); i++) {
        struct rte_malloc_socket_stats heap;
        if (rte_malloc_get_socket_stats(rte_socket_id_by_idx(i), &heap) == 0)
            heap_bytes += heap.heap_allocsz_bytes;
    }
    put(t, "{\"forwarded\": %" PRIu64 ", \"heap_bytes\": %zu, \"drops\": {", sum.forwarded, heap_bytes);
    int first = by_reason(t, &sum, 0, NFC_PUNT_BASE);
    if (sum.no_port)
        put(t, "%s\"server_no_port\": %" PRIu64, first ? "" : ", ", sum.no_port);
    put(t, "}, \"punts\": {"); /* to the control plane, which the server has none of: counted, not sent */
    by_reason(t, &sum, NFC_PUNT_BASE, 256);
    put(t, "}, \"tables\": {");
    for (int i = 0; i < nfc_ntables; i++) {
        put(t, "%s\"%s\": {\"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"entries\": %d", i ? ", " : "",
            nfc_tables[i].name, sum.hits[i], sum.misses[i],
            nfc_tables[i].state ? (int)__atomic_load_n(&nfc_tables[i].live, __ATOMIC_RELAXED) /* not the slots waiting */
            : nfc_tables[i].h != NULL ? rte_hash_count(nfc_tables[i].h) : 0);
        if (nfc_tables[i].state) /* expired entries a full table's inserts removed (nfc_state.c, sweep) */
            put(t, ", \"swept\": %" PRIu64, __atomic_load_n(&nfc_tables[i].swept, __ATOMIC_RELAXED));
        if (nfc_tables[i].lpm >= 0) /* the trie's memory: its roots and tables (nfc_lpm.c), of 2^16 and 2^8 entries */
            put(t, ", \"trie_bytes\": %" PRIu64 ", \"trie_tables\": [%" PRIu64 ", %" PRIu64 "], \"trie_stride1\": %u",
                nfc_lpm_bytes(&nfc_tables[i].trie), nfc_tables[i].trie.tables[1], nfc_tables[i].trie.tables[0],
                nfc_tables[i].trie.stride1);
        put(t, "}");
    }
    struct nfc_copy_stats cs = nfc_state_copy_stats();
    put(t, "}, \"state_copy\": {\"slices\": %" PRIu64 ", \"cpu_ns\": %" PRIu64 ", \"max_ns\": %" PRIu64 "}}",
        cs.slices, cs.cpu_ns, cs.max_ns);
}

int nfc_counters_json(char *buf, int cap)
{
    struct text t = {0};
    nfc_counters_text(&t);
    int n = t.s == NULL ? 0 : snprintf(buf, (size_t)cap, "%s", t.s);
    free(t.s);
    return n < cap ? n : cap - 1;
}

static const char *why(int st)
{
    switch (st) {
    case NFC_E_OUT_OF_RANGE:
        return "a field is wider than the table says (or a prefix longer than its field)";
    case NFC_E_EXISTS:
        return "the key is already in the table";
    case NFC_E_NOT_FOUND:
        return "the key is not in the table";
    case NFC_E_FULL:
        return "the table is full";
    case NFC_E_NO_MEMORY:
        return "out of memory";
    case NFC_E_DUPLICATE:
        return "the same key twice in one message";
    default:
        return "error";
    }
}

static uint32_t record_words(const struct nfc_table *t)
{
    return (uint32_t)(t->key_words + t->arg_words + t->value_words);
}

/* The reply to a DUMP: `page` holds n records after its first word, which becomes `next`. */
static void page_reply(struct client *c, uint64_t *page, uint32_t n, uint32_t next)
{
    page[0] = next; /* where to resume; 0: done */
    reply(c, NFC_OK, n, page, 8 + n * record_words(&nfc_tables[c->q.table]) * 8);
}

/* A page of DUMP: at most `count` entries (0: any) and NFC_CTL_MAX_PAGE bytes from the
 * position in the request body.  A control-plane table is copied here (nfc_table_copy); a
 * data-plane state table where its lcore is not writing, asynchronously (the client waits
 * for it in `copy`: dump_copied). */
static void dump(struct client *c)
{
    const struct nfc_table *t = &nfc_tables[c->q.table];
    uint64_t from = c->q.length >= 8 ? c->body[0] : 0;
    uint32_t stride = record_words(t);
    uint32_t max = (NFC_CTL_MAX_PAGE - 8) / (stride * 8);
    if (c->q.count != 0 && c->q.count < max)
        max = c->q.count;
    if (from > UINT32_MAX) {
        fail(c, NFC_E_OUT_OF_RANGE, 0, "a DUMP position is below 2^32 (DUMP replies give them)");
        return;
    }
    uint64_t *page = malloc(8 + (size_t)max * stride * 8);
    if (page != NULL && t->state)
        c->copy = nfc_state_copy_start(t, (uint32_t)from, max, page + 1);
    if (c->copy != NULL) {
        c->page = page; /* the reply comes with the copy (dump_copied) */
        return;
    }
    if (page == NULL || t->state) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
    } else {
        uint32_t next = (uint32_t)from;
        uint32_t n = nfc_table_copy(t, &next, max, page + 1);
        page_reply(c, page, n, n == max ? next : 0);
    }
    free(page);
}

static void read_entries(struct client *c, const struct nfc_table *tb, uint32_t stride)
{
    uint64_t *out = malloc((size_t)c->q.count * tb->value_words * 8 + 8);
    if (out == NULL) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
        return;
    }
    for (uint32_t i = 0; i < c->q.count; i++) {
        int st = nfc_entry_read(tb, c->body + (size_t)i * stride, out + (size_t)i * tb->value_words);
        if (st != NFC_OK) {
            fail(c, (uint8_t)st, i, why(st));
            free(out);
            return;
        }
    }
    reply(c, NFC_OK, c->q.count, out, c->q.count * tb->value_words * 8);
    free(out);
}

/* Delete every entry: a copy of the keys, then one all-or-nothing DELETE. */
static void clear(struct client *c, struct nfc_table *tb)
{
    uint32_t stride = record_words(tb);
    uint32_t n = (uint32_t)rte_hash_count(tb->h), next = 0, bad = 0;
    uint64_t *rec = malloc((size_t)(n ? n : 1) * stride * 8);
    uint32_t got = rec != NULL ? nfc_table_copy(tb, &next, n, rec) : 0;
    int st = rec == NULL ? NFC_E_NO_MEMORY : nfc_batch(tb, NFC_OP_DELETE, rec, got, stride, &bad);
    if (st == NFC_OK)
        reply(c, NFC_OK, got, NULL, 0);
    else
        fail(c, (uint8_t)st, bad, why(st));
    free(rec);
}

/* ADD, MODIFY, DELETE, READ, CLEAR of a control-plane table. */
static void entries(struct client *c, struct nfc_table *tb)
{
    const struct nfc_ctl_req *q = &c->q;
    uint32_t stride = (uint32_t)(tb->key_words + tb->arg_words);
    if (q->op == NFC_OP_ADD || q->op == NFC_OP_MODIFY)
        stride += tb->value_words;
    if (q->op == NFC_OP_CLEAR)
        stride = 0;
    uint32_t bad = 0;
    int st;
    if (q->count > NFC_CTL_MAX_COUNT || (uint64_t)q->count * stride * 8 != q->length) {
        fail(c, NFC_E_BAD_REQUEST, 0, "the body is not `count` records of this table");
    } else if (q->op == NFC_OP_READ) {
        read_entries(c, tb, stride);
    } else if (q->op == NFC_OP_CLEAR) {
        clear(c, tb);
    } else if ((st = nfc_batch(tb, q->op, c->body, q->count, stride, &bad)) == NFC_OK) {
        reply(c, NFC_OK, bad, NULL, 0);
    } else {
        fail(c, (uint8_t)st, bad, why(st));
    }
}

/* HITS: the table's counts since the last HITS, as many records as one reply holds. */
static void hits(struct client *c, const struct nfc_table *tb)
{
    uint32_t words = tb->key_words + 1u, max = (NFC_CTL_MAX_PAGE - 16) / (words * 8);
    uint64_t *out = malloc(16 + (size_t)max * words * 8);
    if (out == NULL) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
        return;
    }
    uint32_t n = nfc_hits_take(c->q.table, out + 2, max, &out[0], &out[1]);
    reply(c, NFC_OK, n, out, 16 + n * words * 8);
    free(out);
}

/* OBJ_READ and OBJ_WRITE of a register, counter or meter (nfc_objects.h). */
static void object(struct client *c, struct nfc_object *o)
{
    const struct nfc_ctl_req *q = &c->q;
    uint32_t words = nfc_object_words(o), stride = q->op == NFC_OP_OBJ_READ ? 1 : nfc_object_record_words(o), bad = 0;
    if (q->count > NFC_CTL_MAX_COUNT || (uint64_t)q->count * stride * 8 != q->length) {
        fail(c, NFC_E_BAD_REQUEST, 0, "the body is not `count` records of this object");
        return;
    }
    if (q->op == NFC_OP_OBJ_WRITE) {
        if (nfc_object_write(o, c->body, q->count, &bad) == NFC_OK)
            reply(c, NFC_OK, q->count, NULL, 0);
        else
            fail(c, NFC_E_OUT_OF_RANGE, bad, "an index out of range, a value wider than the register, or meter "
                                             "rates rte_meter refuses (cir > 0, pir >= cir, cbs > 0, pbs > 0)");
        return;
    }
    uint64_t *out = malloc((size_t)q->count * words * 8 + 8);
    if (out == NULL)
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
    else if (nfc_object_read(o, c->body, q->count, out, &bad) == NFC_OK)
        reply(c, NFC_OK, q->count, out, q->count * words * 8);
    else
        fail(c, NFC_E_OUT_OF_RANGE, bad, "an index out of range");
    free(out);
}

/* WINDOWS and WINDOW_MERGE: the anti-replay windows (nfc_esp.h). */
static void replay_windows(struct client *c)
{
    const struct nfc_ctl_req *q = &c->q;
    uint32_t bad = 0;
    if (q->op == NFC_OP_WINDOW_MERGE) {
        if (q->count > NFC_CTL_MAX_COUNT || (uint64_t)q->count * 24 != q->length) {
            fail(c, NFC_E_BAD_REQUEST, 0, "the body is not `count` records (SA number, top, bitmap)");
            return;
        }
        for (; bad < q->count; bad++) {
            const uint64_t *r = c->body + 3 * bad;
            if (r[0] > UINT32_MAX) {
                fail(c, NFC_E_OUT_OF_RANGE, bad, "an SA number is below 2^32");
                return;
            }
            if (nfc_replay_merge((uint32_t)r[0], r[1], r[2]) != 0) {
                fail(c, NFC_E_NO_MEMORY, bad, "no window for the SA (no ESP here, or every window is taken)");
                return;
            }
        }
        reply(c, NFC_OK, q->count, NULL, 0);
        return;
    }
    /* one page holds every window (1.5 MiB at most): read under one lock, none is missed by a
     * cuckoo move between pages */
    uint64_t from = q->length >= 8 ? c->body[0] : 0;
    uint32_t max = NFC_REPLAY_SAS;
    uint64_t *page = from > UINT32_MAX ? NULL : malloc(8 + (size_t)max * 24);
    if (page == NULL) {
        fail(c, from > UINT32_MAX ? NFC_E_OUT_OF_RANGE : NFC_E_NO_MEMORY, 0,
             from > UINT32_MAX ? "a WINDOWS position is below 2^32" : "no memory for the reply");
        return;
    }
    uint32_t next = (uint32_t)from, n = nfc_replay_windows(&next, max, page + 1);
    page[0] = n == max ? next : 0;
    reply(c, NFC_OK, n, page, 8 + n * 24);
    free(page);
}

/* PIN, UNPIN, TOUCH, OVERDUE of a switch-cached data-plane state (nfc_state.h). */
static void pinned(struct client *c, struct nfc_table *tb)
{
    const struct nfc_ctl_req *q = &c->q;
    uint32_t stride = tb->key_words + (q->op == NFC_OP_TOUCH ? 1u : 0u), words = 1u + tb->value_words, done = 0;
    if (q->op == NFC_OP_OVERDUE) {
        uint32_t max = NFC_CTL_MAX_PAGE / (tb->key_words * 8u);
        uint64_t *out = malloc((size_t)max * tb->key_words * 8 + 8);
        uint32_t n = out != NULL ? nfc_state_overdue(tb, out, max) : 0;
        if (out == NULL)
            fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
        else
            reply(c, NFC_OK, n, out, n * tb->key_words * 8);
        free(out);
        return;
    }
    if (q->count > NFC_CTL_MAX_COUNT || (uint64_t)q->count * stride * 8 != q->length) {
        fail(c, NFC_E_BAD_REQUEST, 0, "the body is not `count` records of this table");
        return;
    }
    uint64_t *out = q->op == NFC_OP_PIN ? calloc((size_t)q->count * words + 1, 8) : NULL;
    if (q->op == NFC_OP_PIN && out == NULL) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the reply");
        return;
    }
    uint8_t (*keys)[NFC_MAX_KEY] = malloc((size_t)(q->count ? q->count : 1) * NFC_MAX_KEY);
    if (keys == NULL) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the keys");
        free(out);
        return;
    }
    for (uint32_t i = 0; i < q->count; i++) { /* every key checked before any is acted on */
        int st = nfc_entry_check(tb, c->body + (size_t)i * stride, NULL, keys[i]);
        if (st != NFC_OK) {
            fail(c, (uint8_t)st, i, why(st));
            free(keys);
            free(out);
            return;
        }
    }
    uint64_t now = nfc_now_ns();
    for (uint32_t i = 0; i < q->count; i++) {
        int got;
        if (q->op == NFC_OP_PIN) {
            got = nfc_state_pin(tb, keys[i], out + (size_t)i * words + 1);
            if (got < 0) { /* all or nothing: the pins this request made undone (not those it found) */
                for (uint32_t k = 0; k < i; k++)
                    if (out[(size_t)k * words] == 1)
                        nfc_state_unpin(tb, keys[k]);
                fail(c, NFC_E_NO_MEMORY, i, "no memory for the pin (none made)");
                free(keys);
                free(out);
                return;
            }
            out[(size_t)i * words] = (uint64_t)got;
            got = got != 0;
        } else if (q->op == NFC_OP_UNPIN) {
            got = nfc_state_unpin(tb, keys[i]) == 0;
        } else {
            uint64_t age = c->body[(size_t)i * stride + tb->key_words];
            got = nfc_state_touch_at(tb, keys[i], age < now ? now - age : 0);
        }
        done += (uint32_t)got;
    }
    if (q->op == NFC_OP_PIN)
        reply(c, NFC_OK, done, out, q->count * words * 8);
    else
        reply(c, NFC_OK, done, NULL, 0);
    free(keys);
    free(out);
}

/* The whole request in c: queue its reply. */
static void serve(struct client *c)
{
    const struct nfc_ctl_req *q = &c->q;
    struct text t = {0};
    if (q->op == NFC_OP_START) {
        nfc_started = 1;
        reply(c, NFC_OK, 0, NULL, 0);
    } else if (q->op == NFC_OP_HELLO || q->op == NFC_OP_COUNTERS) {
        if (q->op == NFC_OP_HELLO)
            hello(&t);
        else
            nfc_counters_text(&t);
        if (t.s != NULL)
            reply(c, NFC_OK, 0, t.s, (uint32_t)t.n);
        else
            fail(c, NFC_E_NO_MEMORY, 0, "no memory");
    } else if (q->op == NFC_OP_OBJ_READ || q->op == NFC_OP_OBJ_WRITE) {
        if (q->table < nfc_nobjects)
            object(c, &nfc_objects[q->table]);
        else
            fail(c, NFC_E_NO_TABLE, 0, "no such register, counter or meter");
    } else if (q->op == NFC_OP_WINDOWS || q->op == NFC_OP_WINDOW_MERGE) {
        replay_windows(c);
    } else if ((q->op < NFC_OP_ADD || q->op > NFC_OP_CLEAR) && q->op != NFC_OP_HITS &&
               (q->op < NFC_OP_PIN || q->op > NFC_OP_OVERDUE)) {
        fail(c, NFC_E_BAD_OP, 0, "unknown operation");
    } else if (q->table >= nfc_ntables) {
        fail(c, NFC_E_NO_TABLE, 0, "no such table");
    } else if (q->op >= NFC_OP_PIN) {
        if (nfc_tables[q->table].tracked && nfc_tables[q->table].state)
            pinned(c, &nfc_tables[q->table]);
        else
            fail(c, NFC_E_NO_TABLE, 0, "not data-plane state the switch caches: nothing of it is pinned");
    } else if (q->op == NFC_OP_HITS) {
        if (nfc_tables[q->table].tracked)
            hits(c, &nfc_tables[q->table]);
        else
            fail(c, NFC_E_NO_TABLE, 0, "the switch does not cache this table: its hits are not tracked");
    } else if (q->op == NFC_OP_DUMP) {
        dump(c);
    } else if (nfc_tables[q->table].state) {
        fail(c, NFC_E_READ_ONLY, 0, "data-plane state: written by the forwarding lcore only");
    } else {
        entries(c, &nfc_tables[q->table]);
    }
    free(t.s);
}

/* ---- the connections ------------------------------------------------------------------------ */

/* Write what c takes of its reply; -1: close c (an error, or a reply that ends the connection). */
static int flush(struct client *c)
{
    while (c->out != NULL && c->sent < c->out_len) {
        ssize_t r = send(c->fd, c->out + c->sent, c->out_len - c->sent, MSG_NOSIGNAL);
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->sent += (size_t)r;
    }
    free(c->out);
    c->out = NULL;
    c->deadline = 0;
    return c->close_after ? -1 : 0;
}

/* The header just read names a request this program takes, and its body has room; else the
 * reply says why and the connection closes after it. */
static int header_ok(struct client *c)
{
    const struct nfc_ctl_req *q = &c->q;
    if (memcmp(q->magic, NFC_CTL_REQ_MAGIC, 4) != 0 || q->version != NFC_CTL_VERSION ||
        q->length > NFC_CTL_MAX_BODY || q->length % 8 != 0) {
        fail(c, NFC_E_BAD_REQUEST, 0, "bad magic, version or length (this program speaks version 1)");
    } else if (q->length != 0 && (c->body = malloc(q->length)) == NULL) {
        fail(c, NFC_E_NO_MEMORY, 0, "no memory for the request");
    } else {
        return 1;
    }
    c->close_after = 1;
    return 0;
}

/* Read what has arrived of c's request, never past its end, and serve it once whole; -1:
 * close c.  The request's first byte starts its deadline; the reply gets a deadline anew
 * (none while a DUMP waits for its copy). */
static int receive(struct client *c, uint64_t now)
{
    const size_t hdr = sizeof c->q;
    uint8_t *dst = c->got < hdr ? (uint8_t *)&c->q + c->got : (uint8_t *)c->body + (c->got - hdr);
    size_t want = c->got < hdr ? hdr - c->got : hdr + c->q.length - c->got;
    ssize_t r = recv(c->fd, dst, want, 0);
    if (r < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    if (r == 0)
        return -1;
    if (c->got == 0)
        c->deadline = now + timeout_ms * 1000;
    c->got += (size_t)r;
    if (c->got == hdr && !header_ok(c))
        return flush(c);
    if (c->got < hdr || c->got < hdr + c->q.length)
        return 0;
    uint64_t start = now_us();
    serve(c);
    served_us += now_us() - start;
    free(c->body);
    c->body = NULL;
    c->got = 0;
    c->deadline = c->copy != NULL ? 0 : clock_us() + timeout_ms * 1000;
    return flush(c);
}

/* A DUMP of data-plane state waiting for its copy: the reply once the copy is done (BUSY if
 * the forwarding lcore made no progress on it); -1: close c. */
static int dump_copied(struct client *c)
{
    uint32_t n = 0, next = 0;
    uint64_t start = now_us();
    int st = nfc_state_copy_poll(c->copy, &n, &next); /* may copy itself: served time */
    served_us += now_us() - start;
    if (st == NFC_COPY_WAITING)
        return 0;
    nfc_state_copy_end(c->copy);
    c->copy = NULL;
    if (st == NFC_COPY_DONE)
        page_reply(c, c->page, n, next);
    else
        fail(c, NFC_E_BUSY, 0, "the forwarding lcore did not copy the table in time: try again");
    free(c->page);
    c->page = NULL;
    c->deadline = clock_us() + timeout_ms * 1000;
    return flush(c);
}

/* Advance c by what poll reported; nonzero: close it (end of stream, an error, a reply that
 * ends the connection, or its deadline passed). */
static int step(struct client *c, short ev, uint64_t now)
{
    int rc = 0;
    if (ev & POLLNVAL)
        return -1;
    if (c->copy != NULL)
        rc = ev & (POLLERR | POLLHUP) ? -1 : dump_copied(c);
    else if (c->out != NULL && (ev & (POLLOUT | POLLERR | POLLHUP)))
        rc = flush(c);
    else if (c->out == NULL && (ev & (POLLIN | POLLERR | POLLHUP)))
        rc = receive(c, now);
    return rc != 0 || (c->deadline != 0 && now >= c->deadline);
}

static void drop(struct client *c)
{
    if (c->copy != NULL)
        nfc_state_copy_end(c->copy);
    free(c->page);
    close(c->fd);
    free(c->body);
    free(c->out);
}

/* Is --control-group among the peer's supplementary groups (SO_PEERGROUPS, Linux 4.13)? */
static int in_peer_groups(int fd)
{
    gid_t some[64], *g = some;
    socklen_t len = sizeof some;
    int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
    if (rc != 0 && errno == ERANGE && (g = malloc(len)) != NULL)
        rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
    int found = 0;
    for (size_t i = 0; rc == 0 && i < len / sizeof *g; i++)
        found |= g[i] == group;
    if (g != some)
        free(g);
    return found;
}

/* May the peer on fd use the channel: an allowed uid, or a member of --control-group. */
static int allowed(int fd, uid_t *uid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return 0;
    *uid = cr.uid;
    for (int i = 0; i < nallow; i++)
        if (cr.uid == allow[i])
            return 1;
    return group_arg != NULL && (cr.gid == group || in_peer_groups(fd));
}

/* One reply, unasked and without waiting, then close: a peer that is not served. */
static void turn_away(int fd, uint8_t status, const char *why)
{
    struct client c = {.fd = fd};
    fail(&c, status, 0, why);
    if (c.out != NULL)
        (void)send(fd, c.out, c.out_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    drop(&c);
}

static void log_line(const char *fmt, const char *what) __attribute__((format(printf, 1, 0)));
static void log_line(const char *fmt, const char *what)
{
    static unsigned logged;
    if (logged++ < MAX_LOGGED)
        fprintf(stderr, fmt, what);
}

/* Out of descriptors (EMFILE, ENFILE): the spare one answers the first waiting connection
 * instead of leaving it to wait unanswered; 0: there was none to answer, or no spare. */
static int shed(void)
{
    if (spare_fd < 0)
        return 0;
    close(spare_fd);
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0)
        turn_away(fd, NFC_E_BAD_REQUEST, "the server program is out of file descriptors: try again later");
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
}

/* Take the connections waiting on the socket: allowed peers become clients (cl[0..n)), the
 * others are turned away; the new n.  Out of descriptors with none spare: *pause_until is
 * when to look at the socket again (it stays readable, poll would not wait). */
static int admit(struct client *cl, int n, uint64_t *pause_until)
{
    for (int k = 0; k < MAX_ACCEPTS; k++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        uid_t uid = (uid_t)-1;
        char msg[80];
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            log_line("nfc: control connection: %s\n", strerror(errno));
            if (shed())
                continue;
            *pause_until = now_us() + FD_PAUSE_US;
        }
        if (fd < 0)
            break;
        if (!allowed(fd, &uid)) {
            snprintf(msg, sizeof msg, "uid %ld may not use this control channel", uid == (uid_t)-1 ? -1L : (long)uid);
            log_line("nfc: control connection refused: %s\n", msg);
            turn_away(fd, NFC_E_REFUSED, msg);
        } else if (n == NFC_CTL_MAX_CLIENTS) {
            turn_away(fd, NFC_E_BAD_REQUEST, "too many control connections");
        } else {
            cl[n++] = (struct client){.fd = fd};
        }
    }
    return n;
}

/* How long poll may wait (ms): until the nearest deadline or the end of a pause of the
 * socket, at most 100 ms (to see `stopping`; NFC_HITS_DRAIN_MS when hits are tracked),
 * COPY_POLL_US while a DUMP waits for a copy. */
static int poll_ms(const struct client *cl, int n, uint64_t now, uint64_t pause_until)
{
    uint64_t wait = tracking ? NFC_HITS_DRAIN_MS * 1000u : 100000u, real = now_us();
    for (int i = 0; i < n; i++) {
        uint64_t left = cl[i].deadline > now ? cl[i].deadline - now : 0;
        if (cl[i].copy != NULL && wait > COPY_POLL_US)
            wait = COPY_POLL_US;
        if (cl[i].deadline != 0 && left < wait)
            wait = left;
    }
    if (pause_until > real && pause_until - real < wait)
        wait = pause_until - real;
    return (int)((wait + 999) / 1000);
}

/* Poll every client and the socket; each round advances every client by what it has sent or
 * can take, and closes those past their deadline. */
static void *control_main(void *arg)
{
    (void)arg;
    tracking = nfc_hits_any();
    static struct client cl[NFC_CTL_MAX_CLIENTS];
    struct pollfd fds[NFC_CTL_MAX_CLIENTS + 1];
    uint64_t pause_until = 0;
    int n = 0;
    while (!stopping) {
        int listening = now_us() >= pause_until;
        fds[0] = (struct pollfd){.fd = listening ? listen_fd : -1, .events = POLLIN};
        for (int i = 0; i < n; i++) { /* a DUMP waiting for its copy: only a hang-up is of interest */
            short ev = cl[i].copy != NULL ? 0 : cl[i].out != NULL ? POLLOUT : POLLIN;
            fds[i + 1] = (struct pollfd){.fd = cl[i].fd, .events = ev};
        }
        if (poll(fds, (nfds_t)n + 1, poll_ms(cl, n, clock_us(), pause_until)) < 0 && errno != EINTR)
            break;
        uint64_t now = clock_us();
        for (int i = n - 1; i >= 0; i--) /* the last client moves into a closed one's place: seen already */
            if (step(&cl[i], fds[i + 1].revents, now) != 0) {
                drop(&cl[i]);
                cl[i] = cl[--n];
            }
        if (listening && (fds[0].revents & POLLIN))
            n = admit(cl, n, &pause_until);
        if (tracking)
            nfc_hits_drain();
    }
    for (int i = 0; i < n; i++)
        drop(&cl[i]);
    return NULL;
}

/* ---- start-up ------------------------------------------------------------------------------ */

static int number(const char *flag, const char *v, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || *v == '-' || x > max) {
        fprintf(stderr, "nfc: %s takes a number up to %" PRIu64 ", not %s\n", flag, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

int nfc_control_arg(int argc, char **argv)
{
    const char *f = argv[0], *v = argc > 1 ? argv[1] : NULL;
    uint64_t x = 0;
    if (strcmp(f, "--control") != 0 && strcmp(f, "--control-group") != 0 &&
        strcmp(f, "--control-allow-uid") != 0 && strcmp(f, "--control-timeout-ms") != 0)
        return 0;
    if (v == NULL) {
        fprintf(stderr, "nfc: %s takes a value\n", f);
        return -1;
    }
    if (strcmp(f, "--control") == 0) {
        sock_arg = v;
    } else if (strcmp(f, "--control-group") == 0) {
        group_arg = v;
    } else if (strcmp(f, "--control-allow-uid") == 0) {
        if (nallow == MAX_ALLOW || number(f, v, UINT32_MAX - 1, &x) != 0)
            return -1;
        allow[nallow++] = (uid_t)x;
    } else {
        if (number(f, v, 3600000, &x) != 0 || x == 0)
            return -1;
        timeout_ms = x;
    }
    return 2;
}

/* A socket an earlier run left at `path` is removed; a file that is not a socket, or a
 * socket some program answers on, is not: -1 (said why). */
static int clear_path(const char *path, const struct sockaddr_un *a)
{
    struct stat was;
    if (lstat(path, &was) != 0)
        return 0;
    if (!S_ISSOCK(was.st_mode)) { /* a mistyped path must not delete a file */
        fprintf(stderr, "nfc: --control %s exists and is not a socket: not replacing it\n", path);
        return -1;
    }
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = s < 0 ? -1 : connect(s, (const struct sockaddr *)a, sizeof *a);
    int err = errno;
    if (s >= 0)
        close(s);
    if (rc != 0 && (err == ECONNREFUSED || err == ENOENT)) /* nobody listens: left over */
        return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    if (rc == 0 || err == EAGAIN) /* EAGAIN: it listens, its backlog is full */
        fprintf(stderr, "nfc: another program serves --control %s: not taking it over\n", path);
    else
        fprintf(stderr, "nfc: cannot tell whether a program serves --control %s (%s): not replacing it\n", path,
                strerror(err));
    return -1;
}

/* The --control-allow-uid uids that the file's owner bits (its owner) and root's privilege do
 * not already let connect, sorted, once each; how many. */
static int acl_uids(uid_t *out)
{
    int k = 0;
    for (int i = 0; allow_given && i < nallow; i++)
        if (allow[i] != 0 && allow[i] != geteuid())
            out[k++] = allow[i];
    for (int i = 1; i < k; i++) /* insertion sort: at most MAX_ALLOW */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uid_t x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    int m = 0;
    for (int i = 0; i < k; i++)
        if (m == 0 || out[m - 1] != out[i])
            out[m++] = out[i];
    return m;
}

static void acl_entry(struct posix_acl_xattr_entry *e, int tag, int perm, uint32_t id)
{
    e->e_tag = htole16((uint16_t)tag);
    e->e_perm = htole16((uint16_t)perm);
    e->e_id = htole32(id);
}

/* A POSIX access ACL on the socket file (the kernel's xattr form: no libacl) that lets the
 * owner, each of `uids` and, with --control-group, the group connect; 0, or -1 and errno
 * (EOPNOTSUPP: the file system has no ACLs).  Never set through a symlink. */
static int set_acl(const char *path, const uid_t *uids, int k)
{
    struct {
        struct posix_acl_xattr_header h;
        struct posix_acl_xattr_entry e[MAX_ALLOW + 4];
    } acl;
    const int rw = ACL_READ | ACL_WRITE;
    int n = 0;
    acl.h.a_version = htole32(POSIX_ACL_XATTR_VERSION);
    acl_entry(&acl.e[n++], ACL_USER_OBJ, rw, (uint32_t)ACL_UNDEFINED_ID);
    for (int i = 0; i < k; i++) /* sorted by uid, as the kernel requires */
        acl_entry(&acl.e[n++], ACL_USER, rw, (uint32_t)uids[i]);
    acl_entry(&acl.e[n++], ACL_GROUP_OBJ, group_arg != NULL ? rw : 0, (uint32_t)ACL_UNDEFINED_ID);
    acl_entry(&acl.e[n++], ACL_MASK, rw, (uint32_t)ACL_UNDEFINED_ID);
    acl_entry(&acl.e[n++], ACL_OTHER, 0, (uint32_t)ACL_UNDEFINED_ID);
    return lsetxattr(path, "system.posix_acl_access", &acl, sizeof acl.h + (size_t)n * sizeof acl.e[0], 0);
}

/* Let the peers the program serves connect() to the socket file (SO_PEERCRED then decides who
 * is served): it is owner-only (0600) as bound; with --control-group it is handed to the
 * group, 0660; --control-allow-uid uids get an ACL entry each (mode 0666 on a file system
 * without ACLs).  Through lchown, an ACL and fchmodat(AT_SYMLINK_NOFOLLOW): a symlink put in
 * the socket's place is not followed.  0 or -1 (errno). */
static int open_to_peers(const char *path)
{
    uid_t uids[MAX_ALLOW];
    int k = acl_uids(uids);
    if (group_arg != NULL && lchown(path, (uid_t)-1, group) != 0)
        return -1;
    if (k > 0 && set_acl(path, uids, k) == 0)
        return 0;
    if (k > 0 && errno != EOPNOTSUPP)
        return -1;
    if (k > 0)
        fprintf(stderr, "nfc: %s has no POSIX ACLs: the control socket is mode 0666, SO_PEERCRED alone decides "
                        "who is served\n", path);
    mode_t mode = k > 0 ? 0666 : group_arg != NULL ? 0660 : 0600;
    return mode == 0600 ? 0 : fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW);
}

/* Listen on `path`: the socket file is owner-only from the moment it exists (umask), then open
 * to the peers served (open_to_peers).  The file bound is remembered, so that only it is
 * removed at the end. */
static int listen_on(const char *path)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "nfc: control socket path too long: %s\n", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    if (clear_path(path, &a) != 0)
        return -1;
    snprintf(sock_path, sizeof sock_path, "%s", path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t umask_was = umask(0177);
    int ok = listen_fd >= 0 && bind(listen_fd, (struct sockaddr *)&a, sizeof a) == 0;
    umask(umask_was);
    if (!ok || open_to_peers(path) != 0 || lstat(path, &sock_file) != 0 || listen(listen_fd, 16) != 0) {
        fprintf(stderr, "nfc: cannot listen on %s: %s\n", path, strerror(errno));
        if (ok)
            unlink(path); /* the file this program bound */
        return -1;
    }
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

int nfc_control_start(void)
{
    if (sock_arg == NULL)
        return 0;
    allow_given = nallow > 0;
    if (!allow_given) { /* the program's own uid, and root */
        allow[nallow++] = geteuid();
        allow[nallow++] = 0;
    }
    if (group_arg != NULL) {
        struct group *g = getgrnam(group_arg); /* start-up, one thread asks */
        if (g == NULL) {
            fprintf(stderr, "nfc: --control-group %s: no such group\n", group_arg);
            return -1;
        }
        group = g->gr_gid;
    }
    if (listen_on(sock_arg) != 0)
        return -1;
    /* a control thread runs on the cores EAL does not forward on (not the main lcore's) */
    if (rte_ctrl_thread_create(&thread, "nfc-control", NULL, control_main, NULL) != 0) {
        fprintf(stderr, "nfc: cannot start the control thread\n");
        return -1;
    }
    return 0;
}

/* The file at sock_path is still the one this program bound (an inode number can be reused:
 * the change time too). */
static int still_ours(void)
{
    struct stat st;
    return lstat(sock_path, &st) == 0 && st.st_dev == sock_file.st_dev && st.st_ino == sock_file.st_ino &&
           st.st_ctim.tv_sec == sock_file.st_ctim.tv_sec && st.st_ctim.tv_nsec == sock_file.st_ctim.tv_nsec;
}

/* Stop serving; the socket file goes if it is still the one this program bound (a later
 * program may have taken the path over). */
void nfc_control_stop(void)
{
    if (listen_fd < 0)
        return;
    stopping = 1;
    pthread_join(thread, NULL);
    close(listen_fd);
    if (still_ours())
        unlink(sock_path);
    if (spare_fd >= 0)
        close(spare_fd);
    listen_fd = spare_fd = -1;
}
