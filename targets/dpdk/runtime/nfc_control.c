/* nfc server runtime: the control channel (protocol in nfc_ctl.h and docs/control.md), served
 * by one control thread on a UNIX socket, one request at a time from up to 16 clients: the
 * control thread is the tables' only writer while the forwarding lcores run.  Hand-written,
 * shared by every generated program. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_hash.h>
#include <rte_lcore.h>

#include "nfc_ctl.h"
#include "nfc_rt.h"

static int listen_fd = -1;
static volatile int stopping;
static pthread_t thread;
static char sock_path[108];

static int read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int reply(int fd, uint8_t op, uint8_t status, uint32_t index, const void *body, uint32_t len)
{
    struct nfc_ctl_rep r;
    memcpy(r.magic, NFC_CTL_REP_MAGIC, 4);
    r.version = NFC_CTL_VERSION;
    r.status = status;
    r.op = op;
    r.index = index;
    r.length = len;
    if (write_all(fd, &r, sizeof r) != 0)
        return -1;
    return len ? write_all(fd, body, len) : 0;
}

static int fail(int fd, uint8_t op, uint8_t status, uint32_t index, const char *why)
{
    return reply(fd, op, status, index, why, (uint32_t)strlen(why));
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
        put(t, "%s{\"name\": \"%s\", \"src\": \"%s\", \"size\": %u, \"capacity\": %u, \"state\": %d, \"lpm\": %d, "
               "\"keys\": [", i ? ", " : "", tb->name, tb->src, tb->size,
            tb->size < 8 ? 8 : (tb->size < NFC_TABLE_CAP ? tb->size : NFC_TABLE_CAP), tb->state, tb->lpm);
        for (int k = 0; k < tb->nkeys; k++)
            put(t, "%s%u", k ? ", " : "", tb->key_width[k]);
        put(t, "], \"values\": [");
        for (int k = 0; k < tb->nvalues; k++)
            put(t, "%s%u", k ? ", " : "", tb->value_width[k]);
        put(t, "]}");
    }
    put(t, "]}");
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
    put(t, "{\"forwarded\": %" PRIu64 ", \"drops\": {", sum.forwarded);
    int first = 1;
    for (int i = 0; i < 256; i++) {
        if (sum.drops[i] == 0)
            continue;
        put(t, "%s\"%s\": %" PRIu64, first ? "" : ", ", i == 0 ? "server_no_buffer" : nfc_reason(i), sum.drops[i]);
        first = 0;
    }
    if (sum.no_port)
        put(t, "%s\"no_port\": %" PRIu64, first ? "" : ", ", sum.no_port);
    put(t, "}, \"tables\": {");
    for (int i = 0; i < nfc_ntables; i++)
        put(t, "%s\"%s\": {\"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"entries\": %d}", i ? ", " : "",
            nfc_tables[i].name, sum.hits[i], sum.misses[i],
            nfc_tables[i].h != NULL ? rte_hash_count(nfc_tables[i].h) : 0);
    put(t, "}}");
}

int nfc_counters_json(char *buf, int cap)
{
    struct text t = {0};
    nfc_counters_text(&t);
    int n = t.s == NULL ? 0 : snprintf(buf, (size_t)cap, "%s", t.s);
    free(t.s);
    return n < cap ? n : cap - 1;
}

/* The keys of an entry back as the control channel's fields. */
static int unpack_key(const struct nfc_table *t, const uint8_t *key, uint64_t *out)
{
    unsigned off = 0;
    for (int i = 0; i < t->nkeys; i++) {
        out[i] = nfc_get(key, off, t->key_width[i]);
        off += t->key_width[i];
    }
    if (t->lpm >= 0)
        out[t->nkeys] = nfc_get(key, off, 8);
    return t->nkeys + (t->lpm >= 0);
}

static int dump(int fd, const struct nfc_ctl_req *q, const uint64_t *body)
{
    const struct nfc_table *t = &nfc_tables[q->table];
    int nk = t->nkeys + (t->lpm >= 0), stride = nk + t->nvalues;
    uint32_t max = q->count ? q->count : NFC_CTL_MAX_COUNT;
    if ((uint64_t)max * (uint64_t)stride * 8 + 8 > NFC_CTL_MAX_BODY)
        max = (NFC_CTL_MAX_BODY - 8) / ((uint32_t)stride * 8);
    uint64_t *out = malloc(8 + (size_t)max * (size_t)stride * 8);
    if (out == NULL)
        return fail(fd, q->op, NFC_E_NO_MEMORY, 0, "no memory for the reply");
    uint32_t next = q->length >= 8 ? (uint32_t)body[0] : 0, n = 0;
    const void *key;
    void *data;
    while (n < max && rte_hash_iterate(t->h, &key, &data, &next) >= 0) {
        uint64_t *r = out + 1 + (size_t)n * (size_t)stride;
        unpack_key(t, key, r);
        nfc_values_of(t, data, r + nk);
        n++;
    }
    out[0] = n == max ? next : 0; /* where to resume; 0: done */
    int rc = reply(fd, q->op, NFC_OK, n, out, 8 + n * (uint32_t)stride * 8);
    free(out);
    return rc;
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

/* One request; -1: close the connection. */
static int serve_one(int fd)
{
    struct nfc_ctl_req q;
    if (read_all(fd, &q, sizeof q) != 0)
        return -1;
    if (memcmp(q.magic, NFC_CTL_REQ_MAGIC, 4) != 0 || q.version != NFC_CTL_VERSION || q.length > NFC_CTL_MAX_BODY ||
        q.length % 8 != 0) {
        fail(fd, q.op, NFC_E_BAD_REQUEST, 0, "bad magic, version or length (this program speaks version 1)");
        return -1;
    }
    uint64_t *body = q.length ? malloc(q.length) : NULL;
    if (q.length && (body == NULL || read_all(fd, body, q.length) != 0)) {
        free(body);
        return -1;
    }
    int rc = 0;
    struct text t = {0};
    if (q.op == NFC_OP_START) {
        nfc_started = 1;
        rc = reply(fd, q.op, NFC_OK, 0, NULL, 0);
    } else if (q.op == NFC_OP_HELLO || q.op == NFC_OP_COUNTERS) {
        if (q.op == NFC_OP_HELLO)
            hello(&t);
        else
            nfc_counters_text(&t);
        rc = t.s ? reply(fd, q.op, NFC_OK, 0, t.s, (uint32_t)t.n) : fail(fd, q.op, NFC_E_NO_MEMORY, 0, "no memory");
    } else if (q.op < NFC_OP_ADD || q.op > NFC_OP_CLEAR) {
        rc = fail(fd, q.op, NFC_E_BAD_OP, 0, "unknown operation");
    } else if (q.table >= nfc_ntables) {
        rc = fail(fd, q.op, NFC_E_NO_TABLE, 0, "no such table");
    } else if (q.op == NFC_OP_DUMP) {
        rc = dump(fd, &q, body);
    } else if (nfc_tables[q.table].state) {
        rc = fail(fd, q.op, NFC_E_READ_ONLY, 0, "data-plane state: written by the forwarding lcore only");
    } else {
        struct nfc_table *tb = &nfc_tables[q.table];
        uint32_t nk = (uint32_t)(tb->nkeys + (tb->lpm >= 0)), stride = nk;
        if (q.op == NFC_OP_ADD || q.op == NFC_OP_MODIFY)
            stride += tb->nvalues;
        if (q.op == NFC_OP_CLEAR) {
            stride = 0;
        }
        if (q.count > NFC_CTL_MAX_COUNT || (uint64_t)q.count * stride * 8 != q.length) {
            rc = fail(fd, q.op, NFC_E_BAD_REQUEST, 0, "the body is not `count` records of this table");
        } else if (q.op == NFC_OP_READ) {
            uint64_t *out = malloc((size_t)q.count * tb->nvalues * 8 + 8);
            uint32_t i = 0;
            int st = out == NULL ? NFC_E_NO_MEMORY : NFC_OK;
            for (; i < q.count && st == NFC_OK; i++)
                st = nfc_entry_read(tb, body + (size_t)i * stride, out + (size_t)i * tb->nvalues);
            rc = st == NFC_OK ? reply(fd, q.op, NFC_OK, q.count, out, q.count * tb->nvalues * 8)
                              : fail(fd, q.op, (uint8_t)st, i - 1, why(st));
            free(out);
        } else if (q.op == NFC_OP_CLEAR) {
            uint32_t n = (uint32_t)rte_hash_count(tb->h), got = 0, next = 0;
            uint64_t *keys = malloc((size_t)(n ? n : 1) * nk * 8);
            const void *key;
            void *data;
            while (keys != NULL && got < n && rte_hash_iterate(tb->h, &key, &data, &next) >= 0)
                unpack_key(tb, key, keys + (size_t)got++ * nk);
            uint32_t bad = 0;
            int st = keys == NULL ? NFC_E_NO_MEMORY : nfc_batch(tb, NFC_OP_DELETE, keys, got, nk, &bad);
            rc = st == NFC_OK ? reply(fd, q.op, NFC_OK, got, NULL, 0) : fail(fd, q.op, (uint8_t)st, bad, why(st));
            free(keys);
        } else {
            uint32_t bad = 0;
            int st = nfc_batch(tb, q.op, body, q.count, stride, &bad);
            rc = st == NFC_OK ? reply(fd, q.op, NFC_OK, bad, NULL, 0) : fail(fd, q.op, (uint8_t)st, bad, why(st));
        }
    }
    free(t.s);
    free(body);
    return rc;
}

#define MAX_CLIENTS 16

/* Serve every connected client, one whole request at a time: one thread, one writer.  A
 * client that stops half-way through a request is dropped after SO_RCVTIMEO. */
static void *control_main(void *arg)
{
    (void)arg;
    struct pollfd fds[MAX_CLIENTS + 1];
    int n = 1;
    fds[0].fd = listen_fd;
    fds[0].events = POLLIN;
    while (!stopping) {
        if (poll(fds, (nfds_t)n, 100) <= 0)
            continue;
        for (int i = n - 1; i >= 1; i--) {
            if (fds[i].revents == 0)
                continue;
            if ((fds[i].revents & POLLIN) == 0 || serve_one(fds[i].fd) != 0) {
                close(fds[i].fd);
                fds[i] = fds[--n];
            }
        }
        if (fds[0].revents & POLLIN) {
            int fd = accept(listen_fd, NULL, NULL);
            if (fd >= 0 && n <= MAX_CLIENTS) {
                struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                fds[n].fd = fd;
                fds[n].events = POLLIN;
                fds[n].revents = 0;
                n++;
            } else if (fd >= 0) {
                fail(fd, 0, NFC_E_BAD_REQUEST, 0, "too many control connections");
                close(fd);
            }
        }
    }
    for (int i = 1; i < n; i++)
        close(fds[i].fd);
    return NULL;
}

int nfc_control_start(const char *path)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "nfc: control socket path too long: %s\n", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    snprintf(sock_path, sizeof sock_path, "%s", path);
    unlink(path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(listen_fd, 4) != 0) {
        fprintf(stderr, "nfc: cannot listen on %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* a control thread runs on the cores EAL does not forward on (not the main lcore's) */
    if (rte_ctrl_thread_create(&thread, "nfc-control", NULL, control_main, NULL) != 0) {
        fprintf(stderr, "nfc: cannot start the control thread\n");
        return -1;
    }
    return 0;
}

void nfc_control_stop(void)
{
    if (listen_fd < 0)
        return;
    stopping = 1;
    pthread_join(thread, NULL);
    close(listen_fd);
    unlink(sock_path);
    listen_fd = -1;
}
