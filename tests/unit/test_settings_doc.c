/*
 * test_settings_doc.c - the settings table (libhvdc/src/runtime/config.c) is the one source of
 * the table in docs/configuration.md and of the list in hvd_init's comment in hvdc.h: this
 * test regenerates both from the table and fails if either file differs. So every HVD_* setting
 * the code reads is documented, with its default and help as the code has them.
 *
 * Usage: test_settings_doc configuration.md hvdc.h            check (exit 1 with a report)
 *        test_settings_doc --write configuration.md hvdc.h    rewrite the generated blocks
 * Each block sits between a line containing "settings: generated" and one containing
 * "end settings".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/config.h"

#define BEGIN_MARK "settings: generated"
#define END_MARK "end settings"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (text) text[n] = '\0';
    fclose(f);
    return text;
}

static void append(char **buf, size_t *len, const char *s) {
    size_t n = strlen(s);
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

/* docs/configuration.md's rows. */
static char *doc_block(void) {
    char *out = NULL, line[2048];
    size_t len = 0;
    append(&out, &len, "| variable (alias) | default | across ranks | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        hvdc__setting_doc_row(&hvdc__settings[i], line, sizeof line);
        append(&out, &len, line);
        append(&out, &len, "\n");
    }
    return out;
}

/* hvdc.h's list: one comment line per setting. */
static char *header_block(void) {
    char *out = NULL, line[512];
    size_t len = 0;
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        const hvdc_setting *s = &hvdc__settings[i];
        char name[128];
        snprintf(name, sizeof name, "%s%s%s%s", s->name, s->alias ? " (" : "",
                 s->alias ? s->alias : "", s->alias ? ")" : "");
        char dflt[64];
        size_t k = 0;
        for (const char *p = s->default_text; *p && k + 1 < sizeof dflt; p++)
            if (*p != '`') dflt[k++] = *p;
        dflt[k] = '\0';
        snprintf(line, sizeof line, " *   %-62s default %s\n", name, dflt);
        append(&out, &len, line);
    }
    return out;
}

/* Finds the text between the begin line and the end line. */
static int find_block(const char *text, const char **start, const char **end) {
    const char *b = strstr(text, BEGIN_MARK);
    if (!b) return 0;
    b = strchr(b, '\n');
    if (!b) return 0;
    b++;
    const char *e = strstr(b, END_MARK);
    if (!e) return 0;
    while (e > b && e[-1] != '\n') e--; /* the start of the end line */
    *start = b;
    *end = e;
    return 1;
}

static int check_or_write(const char *path, const char *wanted, int write) {
    char *text = read_file(path);
    const char *start, *end;
    if (!text || !find_block(text, &start, &end)) {
        printf("FAIL %s: no block between \"%s\" and \"%s\" lines\n", path, BEGIN_MARK, END_MARK);
        free(text);
        return 1;
    }
    size_t have_len = (size_t)(end - start);
    int same = have_len == strlen(wanted) && memcmp(start, wanted, have_len) == 0;
    int failed = 0;
    if (write && !same) {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(text, 1, (size_t)(start - text), f) != (size_t)(start - text) ||
            fputs(wanted, f) < 0 || fputs(end, f) < 0) failed = 1;
        if (f) fclose(f);
        printf("%s %s\n", failed ? "FAIL writing" : "rewrote", path);
    } else if (!same) {
        printf("FAIL %s: its settings block differs from the table in runtime/config.c.\n"
               "--- expected:\n%s--- found:\n%.*s---\n"
               "Run: build/tests/unit/test_settings_doc --write docs/configuration.md "
               "libhvdc/include/hvdc.h\n",
               path, wanted, (int)have_len, start);
        failed = 1;
    } else {
        printf("ok %s: %zu settings match the table\n", path, hvdc__n_settings);
    }
    free(text);
    return failed;
}

int main(int argc, char **argv) {
    int write = argc == 4 && strcmp(argv[1], "--write") == 0;
    if (argc != 3 + write) {
        fprintf(stderr, "usage: test_settings_doc [--write] configuration.md hvdc.h\n");
        return 2;
    }
    char *doc = doc_block(), *header = header_block();
    int failed = check_or_write(argv[1 + write], doc, write);
    failed |= check_or_write(argv[2 + write], header, write);
    free(doc);
    free(header);
    return failed;
}
