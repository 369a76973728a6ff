/*
 * file_io.h - whole files in and out, for checkpoints and elastic commits: a write that is
 * atomic (a crash leaves the old file or the new one, whole) and a read of a whole file.
 *
 * defines: hvdc__write_file_atomically, hvdc__read_file
 * The caller's thread (rank 0 of a checkpoint or commit).
 */
#ifndef HVDC_FILE_IO_H
#define HVDC_FILE_IO_H

#include <stddef.h>

#include "hvdc.h"

/* buf (nbytes) to path: write path.tmp.<pid>, fsync it, rename it over path, fsync the
 * directory. fn names the public call in messages.
 * @return HVD_OK; HVD_ERR_INVALID_ARG when the system refuses a step (the message names the
 *         file and the system error; path is then as it was). */
hvd_status hvdc__write_file_atomically(const char *fn, const char *path, const void *buf,
                                       size_t nbytes);

/* The whole of path into a new buffer (*buf, *nbytes; the caller frees *buf).
 * @return HVD_OK; HVD_ERR_INVALID_ARG for a file that cannot be opened or read, or is not a
 *         regular file (*missing, if not NULL, is set to 1 when it does not exist);
 *         HVD_ERR_NO_MEMORY. */
hvd_status hvdc__read_file(const char *fn, const char *what, const char *path,
                           unsigned char **buf, size_t *nbytes, int *missing);

#endif
