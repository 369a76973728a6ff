/*
 * log.h - leveled logging to stderr, prefixed with the rank (and the time, when asked).
 * defines: hvdc_log_level, hvdc__log_init, hvdc__log_show_time, hvdc__log_enabled,
 *          hvdc__log_rank, hvdc__log, hvdc__log_block, HVDC_LOG
 * Any thread.
 */
#ifndef HVDC_LOG_H
#define HVDC_LOG_H

typedef enum hvdc_log_level {
    HVDC_LOG_TRACE = 0,
    HVDC_LOG_DEBUG,
    HVDC_LOG_INFO,
    HVDC_LOG_WARNING,
    HVDC_LOG_ERROR,
    HVDC_LOG_FATAL, /* Horovod's highest level: libhvdc has no fatal messages (its errors are
                       returned), so at this level it logs nothing */
} hvdc_log_level;

void hvdc__log_init(hvdc_log_level level, int rank);
/* 1: each line carries the local time to the microsecond, as Horovod's do by default
 * (HVD_LOG_HIDE_TIME=0); 0 (the default): no time. Set once, before other threads log. */
void hvdc__log_show_time(int show);
int hvdc__log_enabled(hvdc_log_level level);
/* The rank set by hvdc__log_init (the runtime's rank, as the user knows it), or -1 before. */
int hvdc__log_rank(void);
void hvdc__log(hvdc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs text of any length (several lines: the prefix goes on the first) if level is enabled. */
void hvdc__log_block(hvdc_log_level level, const char *text);

#define HVDC_LOG(level, ...)                                                                 \
    do {                                                                                     \
        if (hvdc__log_enabled(level)) hvdc__log(level, __VA_ARGS__);                         \
    } while (0)

#endif
