/*
 * status.c - the status table's strings and the per-thread detail message.
 * Any thread; the message lives in thread-local storage so threads never see each other's.
 */
#include "base/status.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

static _Thread_local char last_error[HVDC_ERROR_MAX];

const char *hvd_status_string(hvd_status status) {
    switch (status) {
#define HVD_STATUS_CASE_(name, value, text)                                                  \
    case name:                                                                               \
        return text;
        HVD_STATUS_TABLE(HVD_STATUS_CASE_)
#undef HVD_STATUS_CASE_
    }
    return "unknown status";
}

const char *hvd_last_error(void) { return last_error; }

void hvdc__clear_error(void) { last_error[0] = '\0'; }

static hvd_status fail_v(hvd_status status, const char *fmt, va_list ap) {
    /* formatted aside first: a message may quote the one before it (hvd_last_error() as an
     * argument), which formatting straight into last_error would overwrite while reading */
    char text[HVDC_ERROR_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    memcpy(last_error, text, strlen(text) + 1);
    return status;
}

hvd_status hvdc__fail(hvd_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(status, fmt, ap);
    va_end(ap);
    return status;
}

hvd_status hvdc__fail_mpi(int mpi_err, const char *what, const char *file, int line) {
    char text[MPI_MAX_ERROR_STRING] = "", where[64] = "";
    int len = 0, world_rank = -1, initialized = 0, finalized = 0;
    int mpi_usable = MPI_Initialized(&initialized) == MPI_SUCCESS && initialized &&
                     MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized;
    if (mpi_usable) MPI_Error_string(mpi_err, text, &len);
    /* the runtime's rank (in the communicator given to hvd_init_comm); before it is known,
     * the rank in MPI_COMM_WORLD, said so */
    if (hvdc__log_rank() >= 0) {
        snprintf(where, sizeof where, "rank %d", hvdc__log_rank());
    } else if (mpi_usable && MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS) {
        snprintf(where, sizeof where, "rank %d of MPI_COMM_WORLD", world_rank);
    } else {
        snprintf(where, sizeof where, "a rank not yet known");
    }
    return hvdc__fail(HVD_ERR_MPI, "%s failed at %s:%d on %s: %s", what, file, line, where, text);
}
