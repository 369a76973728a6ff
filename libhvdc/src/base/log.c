/*
 * log.c - leveled logging to stderr. One fprintf per line, so lines from threads don't interleave.
 * Any thread; the level and rank are set once by hvd_init before the background thread starts.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

static hvdc_log_level current_level = HVDC_LOG_WARNING;
static int current_rank = -1;

static const char *const level_names[] = {"trace", "debug", "info", "warning", "error"};

void hvdc__log_init(hvdc_log_level level, int rank) {
    current_level = level;
    current_rank = rank;
}

int hvdc__log_enabled(hvdc_log_level level) { return level >= current_level; }

int hvdc__log_rank(void) { return current_rank; }

void hvdc__log(hvdc_log_level level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[hvdc %s rank %d] %s\n", level_names[level], current_rank, line);
}

void hvdc__log_block(hvdc_log_level level, const char *text) {
    if (hvdc__log_enabled(level))
        fprintf(stderr, "[hvdc %s rank %d] %s\n", level_names[level], current_rank, text);
}
