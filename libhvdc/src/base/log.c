/*
 * log.c - leveled logging to stderr. One fprintf per line, so lines from threads don't interleave.
 * Any thread; the level and rank are set once by hvd_init before the background thread starts.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static hvdc_log_level current_level = HVDC_LOG_WARNING;
static int current_rank = -1;
static int show_time = 0;

static const char *const level_names[] = {"trace", "debug", "info", "warning", "error", "fatal"};

void hvdc__log_init(hvdc_log_level level, int rank) {
    current_level = level;
    current_rank = rank;
}

void hvdc__log_show_time(int show) { show_time = show; }

int hvdc__log_enabled(hvdc_log_level level) { return level >= current_level; }

int hvdc__log_rank(void) { return current_rank; }

/* One line (or block) with the prefix every log line carries: level, rank, and the local time
 * to the microsecond when asked (HVD_LOG_HIDE_TIME=0, as Horovod's lines). */
static void print_prefixed(hvdc_log_level level, const char *text) {
    if (!show_time) {
        fprintf(stderr, "[hvdc %s rank %d] %s\n", level_names[level], current_rank, text);
        return;
    }
    struct timeval now;
    struct tm local;
    char when[32] = "";
    gettimeofday(&now, NULL);
    if (localtime_r(&now.tv_sec, &local)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
    fprintf(stderr, "[hvdc %s.%06ld %s rank %d] %s\n", when, (long)now.tv_usec, level_names[level],
            current_rank, text);
}

void hvdc__log(hvdc_log_level level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    print_prefixed(level, line);
}

void hvdc__log_block(hvdc_log_level level, const char *text) {
    if (hvdc__log_enabled(level)) print_prefixed(level, text);
}
