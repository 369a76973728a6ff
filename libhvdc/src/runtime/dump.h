/*
 * dump.h - SIGUSR1 prints the runtime's state to stderr (queued, announced and, on rank 0, the
 * names waiting for other ranks), for debugging a stuck job: `kill -USR1 <pid>`.
 * The handler only writes a byte to a pipe; a watcher thread turns that into a request the
 * background thread serves between two steps of its work (it owns the state).
 * Installed only when the application has no SIGUSR1 handler of its own and HVD_SIGUSR1_DUMP
 * is not 0; the previous disposition is restored at shutdown.
 * defines: hvdc__dump_install, hvdc__dump_uninstall
 * Thread that calls hvd_init / hvd_shutdown.
 */
#ifndef HVDC_DUMP_H
#define HVDC_DUMP_H

#include <stdatomic.h>

#include "hvdc.h"

/* Makes SIGUSR1 set *requested and signal the background thread through wake(ctx). */
hvd_status hvdc__dump_install(atomic_int *requested, void (*wake)(void *ctx), void *ctx);
void hvdc__dump_uninstall(void);

#endif
