/*
 * idx_reader.c - loads a gzip'd IDX image file and its label file, checking the magic numbers,
 * the image size, that both files hold the same number of examples, that every label is a
 * known class, and that the files end where their headers say. See idx_reader.h for the format.
 */
#include "idx_reader.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned byte, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned byte, 1 dimension */

static void set_error(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint32_t read_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* zlib's message for f's error, without the "path: " prefix gzerror puts before it. */
static const char *gz_message(gzFile f, const char *path) {
    int zerr = 0;
    const char *msg = gzerror(f, &zerr);
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0) msg += n + 2;
    return msg;
}

/* Reads exactly nbytes into buf; on a short read says whether the file was cut short or its
 * compressed data is damaged. what names the part being read, for the message. */
static idx_status read_exact(gzFile f, const char *path, void *buf, size_t nbytes,
                             const char *what, char *err, size_t errlen) {
    size_t got = 0;
    while (got < nbytes) {
        size_t chunk = nbytes - got;
        if (chunk > (1u << 30)) chunk = 1u << 30;
        int n = gzread(f, (unsigned char *)buf + got, (unsigned)chunk);
        if (n < 0) {
            set_error(err, errlen, "%s: damaged gzip data (%s); expected a valid gzip'd IDX "
                      "file, download it again", path, gz_message(f, path));
            return IDX_ERR_READ;
        }
        if (n == 0) {
            set_error(err, errlen, "%s: file ends after %zu of the %zu bytes of the %s; "
                      "the file is truncated, download it again", path, got, nbytes, what);
            return IDX_ERR_READ;
        }
        got += (size_t)n;
    }
    return IDX_OK;
}

/* Fails if anything follows the data the header announced: a sign of the wrong file. */
static idx_status expect_end(gzFile f, const char *path, char *err, size_t errlen) {
    unsigned char extra;
    int n = gzread(f, &extra, 1);
    if (n == 0) return IDX_OK;
    if (n < 0) {
        set_error(err, errlen, "%s: damaged gzip data after the last example (%s)", path,
                  gz_message(f, path));
        return IDX_ERR_READ;
    }
    set_error(err, errlen, "%s: more data than the header announces; expected the file to "
              "end after the last example", path);
    return IDX_ERR_FORMAT;
}

static gzFile open_gz(const char *path, char *err, size_t errlen) {
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        set_error(err, errlen, "%s: cannot open (%s); expected a gzip'd IDX file there "
                  "(on Debian: apt install dataset-fashion-mnist, or pass --data DIR)",
                  path, errno ? strerror(errno) : "out of memory");
    }
    return f;
}

/* images: magic, count, rows, cols, then count*rows*cols bytes. */
static idx_status load_images(idx_dataset *ds, const char *path, int rows, int cols, char *err,
                              size_t errlen) {
    idx_status st = IDX_OK;
    gzFile f = open_gz(path, err, errlen);
    if (f == NULL) return IDX_ERR_OPEN;
    unsigned char hdr[16];
    st = read_exact(f, path, hdr, sizeof hdr, "image header", err, errlen);
    if (st != IDX_OK) goto fail;
    uint32_t magic = read_be32(hdr), n = read_be32(hdr + 4);
    uint32_t r = read_be32(hdr + 8), c = read_be32(hdr + 12);
    if (magic != IDX_MAGIC_IMAGES) {
        set_error(err, errlen, "%s: magic number 0x%08x, expected 0x%08x (IDX images of "
                  "unsigned bytes)%s", path, magic, IDX_MAGIC_IMAGES,
                  magic == IDX_MAGIC_LABELS ? "; this looks like a label file" : "");
        st = IDX_ERR_FORMAT;
        goto fail;
    }
    if (r != (uint32_t)rows || c != (uint32_t)cols) {
        set_error(err, errlen, "%s: images are %ux%u, expected %dx%d", path, r, c, rows, cols);
        st = IDX_ERR_FORMAT;
        goto fail;
    }
    if (n == 0 || n > (1u << 26)) {
        set_error(err, errlen, "%s: header says %u images, expected 1 to %u", path, n,
                  1u << 26);
        st = IDX_ERR_FORMAT;
        goto fail;
    }
    size_t nbytes = (size_t)n * (size_t)r * (size_t)c;
    ds->images = malloc(nbytes);
    if (ds->images == NULL) {
        set_error(err, errlen, "%s: cannot allocate %zu bytes for the images", path, nbytes);
        st = IDX_ERR_NO_MEMORY;
        goto fail;
    }
    st = read_exact(f, path, ds->images, nbytes, "image data", err, errlen);
    if (st != IDX_OK) goto fail;
    st = expect_end(f, path, err, errlen);
    if (st != IDX_OK) goto fail;
    ds->count = (int)n;
    ds->rows = rows;
    ds->cols = cols;
fail:
    gzclose(f);
    return st;
}

/* labels: magic, count, then count bytes, each below num_classes. */
static idx_status load_labels(idx_dataset *ds, const char *path, int num_classes,
                              char *err, size_t errlen) {
    idx_status st = IDX_OK;
    gzFile f = open_gz(path, err, errlen);
    if (f == NULL) return IDX_ERR_OPEN;
    unsigned char hdr[8];
    st = read_exact(f, path, hdr, sizeof hdr, "label header", err, errlen);
    if (st != IDX_OK) goto fail;
    uint32_t magic = read_be32(hdr), n = read_be32(hdr + 4);
    if (magic != IDX_MAGIC_LABELS) {
        set_error(err, errlen, "%s: magic number 0x%08x, expected 0x%08x (IDX labels of "
                  "unsigned bytes)%s", path, magic, IDX_MAGIC_LABELS,
                  magic == IDX_MAGIC_IMAGES ? "; this looks like an image file" : "");
        st = IDX_ERR_FORMAT;
        goto fail;
    }
    if (n != (uint32_t)ds->count) {
        set_error(err, errlen, "%s: %u labels, but the image file holds %d images; expected "
                  "the labels that belong to those images", path, n, ds->count);
        st = IDX_ERR_MISMATCH;
        goto fail;
    }
    ds->labels = malloc(n);
    if (ds->labels == NULL) {
        set_error(err, errlen, "%s: cannot allocate %u bytes for the labels", path, n);
        st = IDX_ERR_NO_MEMORY;
        goto fail;
    }
    st = read_exact(f, path, ds->labels, n, "label data", err, errlen);
    if (st != IDX_OK) goto fail;
    st = expect_end(f, path, err, errlen);
    if (st != IDX_OK) goto fail;
    for (uint32_t i = 0; i < n; i++) {
        if (ds->labels[i] >= num_classes) {
            set_error(err, errlen, "%s: label %u of example %u, expected 0 to %d", path,
                      ds->labels[i], i, num_classes - 1);
            st = IDX_ERR_FORMAT;
            goto fail;
        }
    }
fail:
    gzclose(f);
    return st;
}

idx_status idx_dataset_load(idx_dataset *ds, const char *images_path, const char *labels_path,
                            int rows, int cols, int num_classes, char *err, size_t errlen) {
    if (ds == NULL || images_path == NULL || labels_path == NULL || rows <= 0 || cols <= 0 ||
        num_classes <= 0 || num_classes > 256) {
        set_error(err, errlen, "idx_dataset_load: invalid argument (NULL pointer, or a size "
                  "or class count out of range)");
        return IDX_ERR_INVALID_ARG;
    }
    memset(ds, 0, sizeof *ds);
    set_error(err, errlen, "");
    errno = 0;
    idx_status st = load_images(ds, images_path, rows, cols, err, errlen);
    if (st == IDX_OK) {
        errno = 0;
        st = load_labels(ds, labels_path, num_classes, err, errlen);
    }
    if (st != IDX_OK) idx_dataset_free(ds);
    return st;
}

void idx_dataset_free(idx_dataset *ds) {
    if (ds == NULL) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

const char *idx_status_string(idx_status status) {
    switch (status) {
    case IDX_OK: return "success";
    case IDX_ERR_OPEN: return "cannot open file";
    case IDX_ERR_READ: return "truncated or damaged file";
    case IDX_ERR_FORMAT: return "not the expected IDX file";
    case IDX_ERR_MISMATCH: return "image and label files disagree";
    case IDX_ERR_NO_MEMORY: return "out of memory";
    case IDX_ERR_INVALID_ARG: return "invalid argument";
    }
    return "unknown idx_status";
}
