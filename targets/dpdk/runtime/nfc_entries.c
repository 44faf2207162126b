/* nfc server runtime: the entries file, loaded before forwarding starts.  One entry per line:
 * `table key... : value...`, numbers in C syntax of up to 128 bits, an LPM key as
 * value/prefix-length. */
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
        if (t != NULL && t->acl) {
            fprintf(stderr, "nfc: %s:%d: table %s has ternary or range keys: load it over the control channel\n", path,
                    lineno, t->name);
            fclose(f);
            return -1;
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
            return -1;
        }
        n++;
    }
    fclose(f);
    return n;
}
