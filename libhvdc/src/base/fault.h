/*
 * fault.h - named failure switches for tests: HVDC_TEST_FAULTS=site[,site...] makes
 * hvdc__fault(site) return 1, so a test can drive an error path that a healthy machine never
 * takes (a thread that cannot start, an allocation that fails) and the sanitizer stage can check
 * that path for leaks. Unset (always, outside tests), every switch is off and costs one load.
 * Sites: see the calls of hvdc__fault; tests/mpi/test_faults.c lists the ones it drives.
 * defines: hvdc__fault
 * Any thread.
 */
#ifndef HVDC_FAULT_H
#define HVDC_FAULT_H

/* @return 1 if site is named in HVDC_TEST_FAULTS, else 0. */
int hvdc__fault(const char *site);

#endif
