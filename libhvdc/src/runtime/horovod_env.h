/*
 * horovod_env.h - Horovod 0.28's variables that libhvdc does not use (horovod_env.c has why
 * each is listed, and which it leaves out).
 * defines: hvdc_unused_variable, hvdc__horovod_unused, hvdc__n_horovod_unused,
 *          hvdc__horovod_unused_notes
 * Thread that calls hvd_init (the table: any thread, read-only).
 */
#ifndef HVDC_HOROVOD_ENV_H
#define HVDC_HOROVOD_ENV_H

#include <stddef.h>

#include "runtime/config.h"

typedef struct hvdc_unused_variable {
    const char *name;
    const char *honoured; /* a value that is what libhvdc does anyway (case-insensitive), or NULL */
    const char *why;      /* why libhvdc does not use it, for the user */
} hvdc_unused_variable;

extern const hvdc_unused_variable hvdc__horovod_unused[];
extern const size_t hvdc__n_horovod_unused;

/* A note for each of them that lookup finds set (to another value than the honoured one). */
void hvdc__horovod_unused_notes(hvdc_env_lookup lookup, void *ctx, hvdc_notes *notes);

#endif
