/* nfc server runtime: the entries file, loaded before forwarding starts.  One entry per line:
 * `table key... : value...`, numbers in C syntax of up to 128 bits, an LPM key as
 * value/prefix-length.  A table with ternary or range keys: value&&&mask, low..high and
 * `@priority` too; its lines are added in one all-or-nothing batch when the file is read. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_hash.h>

#include "nfc_ctl.h"
#include "nfc_rt.h"

/* A number in C syntax (0x hex, 0 octal, else decimal) of up to 128 bits; *end after it
 * (== s: none, or too big). */
static nfc_u128 number(const char *s, char **end)
{
    unsigned base = 10;
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && isxdigit((unsigned char)p[2])) {
        base = 16;
        p += 2;
    } else if (p[0] == '0') {
        base = 8;
    }
    nfc_u128 v = 0;
    const nfc_u128 top = ~(nfc_u128)0;
    for (; *p != '\0'; p++) {
        unsigned d = isdigit((unsigned char)*p) ? (unsigned)(*p - '0')
                     : isxdigit((unsigned char)*p) ? (unsigned)(tolower((unsigned char)*p) - 'a' + 10) : 99;
        if (d >= base)
            break;
        if (v > (top - d) / base) { /* over 128 bits */
            *end = (char *)s;
            return 0;
        }
        v = v * base + d;
    }
    *end = (char *)(p == s ? s : p);
    return v;
}

/* Every table of the file sized for its lines before any is loaded: a first pass counts the
 * lines per table name (a table short of memory for them still loads what fits). */
static void reserve_lines(FILE *f)
{
    static uint64_t lines[NFC_MAX_TABLES];
    char line[4096];
    memset(lines, 0, sizeof lines);
    while (fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *name = strtok_r(line, " \t\n", &save);
        int ti = name != NULL && name[0] != '#' ? nfc_table_find(name) : -1;
        if (ti >= 0 && ti < NFC_MAX_TABLES)
            lines[ti]++;
    }
    for (int i = 0; i < nfc_ntables && i < NFC_MAX_TABLES; i++)
        if (lines[i] > 0)
            nfc_table_reserve(&nfc_tables[i], rte_hash_count(nfc_tables[i].h) + lines[i]);
    rewind(f);
}

/* The records of an ACL table's lines, and the line of each. */
struct pending {
    uint64_t *rec;
    int *line;
    uint32_t n, cap, stride;
};
static struct pending pending[NFC_MAX_TABLES];

static void drop_pending(void)
{
    for (int i = 0; i < NFC_MAX_TABLES; i++) {
        free(pending[i].rec);
        free(pending[i].line);
    }
    memset(pending, 0, sizeof pending);
}

/* One line of a ternary / range table (after its name): each key field as its kind writes it
 * (value; value/prefix-length; value&&&mask; low..high; a plain value is the whole field),
 * `@priority`, then ':' and the values; appended to q as a control-channel record. */
static int acl_line(struct pending *q, const struct nfc_table *t, char *save, int lineno)
{
    uint64_t vals[2 * NFC_MAX_FIELDS], args[2 * NFC_MAX_FIELDS + 1], values[2 * NFC_MAX_FIELDS], prio = 0;
    int fk = 0, fv = 0, nk = 0, na = 0, nv = 0, after = 0, has_prio = 0;
    for (char *tok = strtok_r(NULL, " \t\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\n", &save)) {
        char *end = NULL;
        if (strcmp(tok, ":") == 0 && !after) {
            after = 1;
            continue;
        }
        if (tok[0] == '@' && !after && !has_prio) {
            prio = strtoull(tok + 1, &end, 10);
            has_prio = end != tok + 1 && *end == '\0';
            if (!has_prio)
                return -1;
            continue;
        }
        if (after ? fv >= t->nvalues : fk >= t->nkeys)
            return -1;
        unsigned w = after ? t->value_width[fv] : t->key_width[fk];
        nfc_u128 v = number(tok, &end), arg = 0;
        if (end == tok || (w < 128 && (v >> w) != 0))
            return -1;
        if (after) {
            nfc_to_words(v, w, values + nv);
            nv += (int)nfc_words(w);
            fv++;
            continue;
        }
        int m = t->match[fk];
        if (m == NFC_M_LPM) {
            arg = w;
            if (*end == '/') {
                char *e2 = NULL;
                arg = strtoull(end + 1, &e2, 10);
                end = e2 == end + 1 ? end : e2;
            }
        } else if (m == NFC_M_TERNARY) {
            arg = nfc_maskw(w);
            if (strncmp(end, "&&&", 3) == 0) {
                char *e2 = NULL;
                arg = number(end + 3, &e2);
                end = e2 == end + 3 ? end : e2;
            }
        } else if (m == NFC_M_RANGE) {
            arg = v;
            if (strncmp(end, "..", 2) == 0) {
                char *e2 = NULL;
                arg = number(end + 2, &e2);
                end = e2 == end + 2 ? end : e2;
            }
        }
        if (*end != '\0')
            return -1;
        nfc_to_words(v, w, vals + nk);
        nk += (int)nfc_words(w);
        if (m == NFC_M_LPM) {
            args[na++] = (uint64_t)arg;
        } else if (m != NFC_M_EXACT) {
            nfc_to_words(arg, w, args + na);
            na += (int)nfc_words(w);
        }
        fk++;
    }
    if (!has_prio || fk != t->nkeys || fv != t->nvalues)
        return -1;
    args[na++] = prio;
    q->stride = (uint32_t)(nk + na + nv);
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? 2 * q->cap : 64;
        uint64_t *rec = realloc(q->rec, (size_t)cap * q->stride * 8);
        int *line = rec != NULL ? realloc(q->line, (size_t)cap * sizeof *line) : NULL;
        if (rec != NULL)
            q->rec = rec;
        if (line == NULL)
            return -1;
        q->line = line;
        q->cap = cap;
    }
    uint64_t *r = q->rec + (size_t)q->n * q->stride;
    memcpy(r, vals, (size_t)nk * 8);
    memcpy(r + nk, args, (size_t)na * 8);
    memcpy(r + nk + na, values, (size_t)nv * 8);
    q->line[q->n++] = lineno;
    return 0;
}

int nfc_load_entries(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "nfc: cannot open entries file %s: %s\n", path, strerror(errno));
        return -1;
    }
    reserve_lines(f);
    char line[4096];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char *save = NULL;
        char *name = strtok_r(line, " \t\n", &save);
        if (name == NULL || name[0] == '#')
            continue;
        int ti = nfc_table_find(name);
        const struct nfc_table *t = ti >= 0 ? &nfc_tables[ti] : NULL;
        /* each field as its words (nfc_words of its width, least significant first) */
        uint64_t keys[2 * NFC_MAX_FIELDS + 1], values[2 * NFC_MAX_FIELDS], plen = 0;
        int nk = 0, nv = 0, fk = 0, fv = 0, after = 0, has_plen = 0, bad = ti < 0;
        if (t != NULL && t->acl) { /* kept, and added in one batch per table at the end (one classifier build) */
            if (acl_line(&pending[ti], t, save, lineno) != 0) {
                fprintf(stderr, "nfc: %s:%d: entry rejected by table %s (key fields as value, value/prefix-length, "
                                "value&&&mask or low..high, @priority, then ':' and the values)\n", path, lineno, t->name);
                fclose(f);
                drop_pending();
                return -1;
            }
            n++;
            continue;
        }
        for (char *tok = strtok_r(NULL, " \t\n", &save); tok != NULL && !bad; tok = strtok_r(NULL, " \t\n", &save)) {
            if (strcmp(tok, ":") == 0) {
                after = 1;
                continue;
            }
            char *end = NULL;
            nfc_u128 v = number(tok, &end);
            if (!after && *end == '/' && !has_plen) { /* value/prefix-length of an LPM key */
                char *end2 = NULL;
                plen = strtoull(end + 1, &end2, 10);
                has_plen = end2 != end + 1 && *end2 == '\0';
                end = has_plen ? end2 : end;
            }
            bad = end == tok || *end != '\0' || (after ? fv >= t->nvalues : fk >= t->nkeys);
            if (bad)
                break;
            unsigned w = after ? t->value_width[fv++] : t->key_width[fk++];
            bad = w < 128 && (v >> w) != 0;
            nfc_to_words(v, w, after ? values + nv : keys + nk);
            *(after ? &nv : &nk) += (int)nfc_words(w);
        }
        if (!bad && has_plen)
            keys[nk++] = plen; /* the prefix length goes last */
        bad = bad || fk != t->nkeys || fv != t->nvalues || (t->lpm >= 0) != has_plen;
        int st = bad ? -1 : nfc_entry_add(&nfc_tables[ti], keys, values, 0);
        if (st != NFC_OK) {
            fprintf(stderr, "nfc: %s:%d: entry rejected%s%s (status %d)\n", path, lineno, t ? " by table " : ": no table ",
                    t ? t->name : name, st);
            fclose(f);
            drop_pending();
            return -1;
        }
        n++;
    }
    fclose(f);
    for (int i = 0; i < nfc_ntables && i < NFC_MAX_TABLES; i++) {
        struct pending *q = &pending[i];
        uint32_t bad = 0;
        int st = q->n == 0 ? NFC_OK : nfc_batch(&nfc_tables[i], NFC_OP_ADD, q->rec, q->n, q->stride, &bad);
        if (st != NFC_OK) {
            fprintf(stderr, "nfc: %s:%d: entry rejected by table %s (status %d)\n", path, q->line[bad < q->n ? bad : 0],
                    nfc_tables[i].name, st);
            drop_pending();
            return -1;
        }
    }
    drop_pending();
    return n;
}
