/*
 * agree.c - hvd_init's agreement steps (see agree.h). Two small collectives: an all-reduce of
 * "the first rank that failed" (plus a broadcast of its message when there is one), and an
 * all-gather of the must-agree settings as text.
 * The thread that calls hvd_init.
 */
#include "runtime/agree.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define VALUE_BYTES 96 /* a setting's value as text; longer values are compared by prefix */

hvd_status hvdc__agree(MPI_Comm comm, hvd_status mine) {
    hvd_status st = HVD_OK;
    int rank = 0, first = INT_MAX, status = (int)mine;
    char message[HVDC_ERROR_MAX] = "";
    if (mine != HVD_OK) snprintf(message, sizeof message, "%s", hvd_last_error());
    CHECK_MPI(MPI_Comm_rank(comm, &rank));
    first = mine != HVD_OK ? rank : INT_MAX;
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == INT_MAX) return HVD_OK;
    CHECK_MPI(MPI_Bcast(&status, 1, MPI_INT, first, comm));
    CHECK_MPI(MPI_Bcast(message, (int)sizeof message, MPI_CHAR, first, comm));
    message[sizeof message - 1] = '\0';
    return hvdc__fail((hvd_status)status, "rank %d: %s", first, message);
fail:
    return st;
}

/* Appends ", ranks a,b,c" style lists: the ranks whose value (in all) equals value. */
static void describe_holders(char *out, size_t len, const char *all, int size, int n_settings,
                             int k, const char *value) {
    size_t used = strlen(out);
    int listed = 0;
    for (int r = 0; r < size && used + 16 < len; r++) {
        if (strncmp(all + ((size_t)r * (size_t)n_settings + (size_t)k) * VALUE_BYTES, value, VALUE_BYTES) != 0)
            continue;
        if (listed++ == 8) {
            used += (size_t)snprintf(out + used, len - used, ",...");
            break;
        }
        used += (size_t)snprintf(out + used, len - used, "%s%d", listed > 1 ? "," : "", r);
    }
}

hvd_status hvdc__agree_settings(MPI_Comm comm, const hvdc_config *config) {
    hvd_status st = HVD_OK;
    int size = 1, n = 0;
    char *mine = NULL, *all = NULL;
    CHECK_MPI(MPI_Comm_size(comm, &size));
    for (size_t i = 0; i < hvdc__n_settings; i++) n += hvdc__settings[i].must_agree;
    mine = calloc((size_t)n, VALUE_BYTES);
    all = calloc((size_t)n * (size_t)size, VALUE_BYTES);
    if (!mine || !all) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory comparing settings across ranks");
        goto fail;
    }
    const hvdc_setting *agreed[64];
    int k = 0;
    for (size_t i = 0; i < hvdc__n_settings && k < 64; i++) {
        if (!hvdc__settings[i].must_agree) continue;
        agreed[k] = &hvdc__settings[i];
        hvdc__setting_format(agreed[k], config, mine + (size_t)k * VALUE_BYTES, VALUE_BYTES);
        k++;
    }
    CHECK_MPI(MPI_Allgather(mine, n * VALUE_BYTES, MPI_CHAR, all, n * VALUE_BYTES, MPI_CHAR, comm));
    for (k = 0; k < n; k++) {
        /* the distinct values, in the order of the first rank that has each */
        char report[HVDC_ERROR_MAX / 2] = "";
        int distinct = 0;
        for (int r = 0; r < size; r++) {
            const char *value = all + ((size_t)r * (size_t)n + (size_t)k) * VALUE_BYTES;
            int seen = 0;
            for (int q = 0; q < r && !seen; q++)
                seen = strncmp(all + ((size_t)q * (size_t)n + (size_t)k) * VALUE_BYTES, value, VALUE_BYTES) == 0;
            if (seen) continue;
            int holders = 0;
            for (int q = r; q < size; q++)
                holders += strncmp(all + ((size_t)q * (size_t)n + (size_t)k) * VALUE_BYTES, value, VALUE_BYTES) == 0;
            size_t used = strlen(report);
            snprintf(report + used, sizeof report - used, "%s'%.*s' on rank%s ", distinct++ ? "; " : "",
                     VALUE_BYTES, value, holders > 1 ? "s" : "");
            describe_holders(report, sizeof report, all, size, n, k, value);
        }
        if (distinct > 1) {
            st = hvdc__fail(HVD_ERR_CONFIG,
                            "%s differs across ranks (%s). It changes what ranks send to each "
                            "other, so it must be the same on every rank: set it in every "
                            "rank's environment (hvdcrun passes every HVD_* variable set "
                            "where it runs; with mpirun by hand: -x %s)",
                            agreed[k]->name, report, agreed[k]->name);
            goto fail;
        }
    }
fail:
    free(mine);
    free(all);
    return st;
}
