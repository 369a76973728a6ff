/*
 * status.h - error reporting inside libhvdc: the thread-local detail message behind
 * hvd_last_error(), and the CHECK macros that record file:line and jump to a function's fail:.
 *
 * defines: hvdc__fail, hvdc__fail_mpi, hvdc__clear_error, CHECK, CHECK_MPI
 * Any thread.
 */
#ifndef HVDC_STATUS_H
#define HVDC_STATUS_H

#include "hvdc.h"

/* Longest detail message kept, in bytes. */
#define HVDC_ERROR_MAX 1024

/* Records a formatted detail message for this thread and returns status. */
hvd_status hvdc__fail(hvd_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void hvdc__clear_error(void);

/* Formats an MPI error code as "MPI_Xxx failed at file:line on rank R: <MPI's text>". */
hvd_status hvdc__fail_mpi(int mpi_err, const char *what, const char *file, int line);

/* Inside a function with `hvd_status st;` and a `fail:` label. */
#define CHECK(expr)                                                                          \
    do {                                                                                     \
        st = (expr);                                                                         \
        if (st != HVD_OK) goto fail;                                                         \
    } while (0)

#define CHECK_MPI(call)                                                                      \
    do {                                                                                     \
        int mpi_err_ = (call);                                                               \
        if (mpi_err_ != MPI_SUCCESS) {                                                       \
            st = hvdc__fail_mpi(mpi_err_, #call, __FILE__, __LINE__);                         \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

#endif
