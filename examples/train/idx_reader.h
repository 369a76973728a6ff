/*
 * idx_reader.h - reads an image/label pair of gzip'd IDX files (the MNIST and Fashion-MNIST
 * format) into memory.
 *
 * defines: idx_dataset_load, idx_dataset_free, idx_status_string
 *
 * The IDX format (big-endian): a 4-byte magic 0x000008DD where 08 says "unsigned byte" and DD
 * is the number of dimensions, then DD 4-byte sizes, then the data in row-major order.
 *   images: magic 0x00000803, then count, rows, cols, then count*rows*cols bytes (0..255)
 *   labels: magic 0x00000801, then count, then count bytes (class numbers)
 * Files are read with zlib's gzread, so an uncompressed file works too.
 *
 * Errors come back as an idx_status and a message in the caller's buffer naming the file, what
 * was found and what was expected. Nothing in this module exits or prints.
 */
#ifndef IDX_READER_H
#define IDX_READER_H

#include <stddef.h>
#include <stdint.h>

typedef enum idx_status {
    IDX_OK = 0,
    IDX_ERR_OPEN,      /* the file is missing or unreadable */
    IDX_ERR_READ,      /* the file is truncated or not valid gzip */
    IDX_ERR_FORMAT,    /* wrong magic number, sizes or label values */
    IDX_ERR_MISMATCH,  /* the image and label files disagree on the count */
    IDX_ERR_NO_MEMORY,
    IDX_ERR_INVALID_ARG, /* NULL pointer or non-positive size passed in */
} idx_status;

typedef struct idx_dataset {
    int count;       // N, number of examples
    int rows;        // H, 28 for (Fashion-)MNIST
    int cols;        // W, 28 for (Fashion-)MNIST
    uint8_t *images; // (N, H*W) pixel intensities 0..255
    uint8_t *labels; // (N,) class numbers 0..num_classes-1
} idx_dataset;

/* Loads images_path and labels_path into *ds. Each image must be rows x cols and each label
 * below num_classes. On failure *ds is left empty (safe to pass to idx_dataset_free) and
 * err (errlen bytes, may be NULL) holds a one-line message. */
idx_status idx_dataset_load(idx_dataset *ds, const char *images_path, const char *labels_path,
                            int rows, int cols, int num_classes, char *err, size_t errlen);

/* Frees what idx_dataset_load allocated and empties *ds. NULL-safe; safe to call twice. */
void idx_dataset_free(idx_dataset *ds);

/* A short description of a status; never NULL. */
const char *idx_status_string(idx_status status);

#endif /* IDX_READER_H */
