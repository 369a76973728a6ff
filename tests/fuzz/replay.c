/*
 * replay.c - a main() for fuzz_wire.c without libFuzzer: runs the target once on every file
 * named on the command line (directories: every file in them, sorted), so any compiler can
 * replay the seed corpus and the regressions as an ordinary test. A broken property aborts
 * inside the target; otherwise prints "replayed N inputs" and exits 0.
 *
 * defines: main
 * Single-threaded.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on one file. @return 0, or -1 if it cannot be read. */
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t len = 0, cap = 0, got;
    uint8_t chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got > cap) {
            cap = 2 * (len + got);
            uint8_t *more = realloc(data, cap);
            if (!more) {
                fprintf(stderr, "%s: out of memory\n", path);
                free(data);
                fclose(f);
                return -1;
            }
            data = more;
        }
        memcpy(data + len, chunk, got);
        len += got;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "%s: read error\n", path);
        free(data);
        return -1;
    }
    /* libFuzzer hands the target a buffer of exactly len bytes; so do we */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        return -1;
    }
    if (len) memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of a directory in name order; adds to *count. @return failures. */
static int replay_dir(const char *dir, int *count) {
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ".", "..", ".gitkeep" */
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **more = realloc(names, cap * sizeof *names);
            if (!more) {
                bad = 1;
                break;
            }
            names = more;
        }
        size_t size = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(size);
        if (!names[n]) {
            bad = 1;
            break;
        }
        snprintf(names[n], size, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(names[i]) != 0) bad++;
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    int count = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad++;
        } else if (S_ISDIR(st.st_mode)) {
            bad += replay_dir(argv[i], &count);
        } else {
            bad += replay_file(argv[i]) != 0;
            count++;
        }
    }
    printf("replayed %d inputs, %d unreadable\n", count, bad);
    return bad ? 1 : 0;
}
