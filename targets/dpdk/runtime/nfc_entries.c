/* nfc server runtime: the entries file (one entry per line: `table key... : value...`). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nfc_rt.h"

int nfc_load_entries(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "nfc: cannot open entries file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char *save = NULL;
        char *table = strtok_r(line, " \t\n", &save);
        if (table == NULL || table[0] == '#')
            continue;
        uint64_t keys[33], values[32], plen = 0;
        int nk = 0, nv = 0, after = 0, has_plen = 0;
        for (char *tok = strtok_r(NULL, " \t\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\n", &save)) {
            if (strcmp(tok, ":") == 0) {
                after = 1;
                continue;
            }
            char *end = NULL;
            uint64_t v = strtoull(tok, &end, 0);
            if (!after && *end == '/' && !has_plen) { /* value/prefix-length of an LPM key */
                char *end2 = NULL;
                plen = strtoull(end + 1, &end2, 10);
                has_plen = end2 != end + 1 && *end2 == '\0';
                end = has_plen ? end2 : end;
            }
            if (end == tok || *end != '\0' || (after ? nv : nk) >= 32) {
                fprintf(stderr, "nfc: %s:%d: bad value '%s'\n", path, lineno, tok);
                fclose(f);
                return -1;
            }
            if (after)
                values[nv++] = v;
            else
                keys[nk++] = v;
        }
        if (has_plen)
            keys[nk++] = plen; /* the prefix length goes last */
        if (nfc_table_add(table, keys, nk, values, nv) != 0) {
            fprintf(stderr, "nfc: %s:%d: entry rejected by table %s\n", path, lineno, table);
            fclose(f);
            return -1;
        }
        n++;
    }
    fclose(f);
    return n;
}
