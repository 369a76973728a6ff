/*
 * fault.h - named failure switches for tests: HVDC_TEST_FAULTS=site[,site...] makes
 * hvdc__fault(site) return 1, so a test can drive an error path that a healthy machine never
 * takes (a thread that cannot start, an allocation that fails) and the sanitizer stage can check
 * that path for leaks. Unset (always, outside tests), every switch is off and costs one load.
 * Sites: see the calls of hvdc__fault; tests/mpi/test_faults.c lists the ones it drives.
 *
 * HVDC_TEST_GPU_COUNT=n likewise makes the GPU backend see n CUDA devices, so the device
 * choice and the refusal of a device that is not visible can be tested on machines with fewer
 * GPUs than ranks, or none (CUDA calls on a pretended device then fail like a broken one).
 *
 * HVDC_TEST_NODE_SIZE=k makes every k consecutive ranks a node (base/nodes.h), so what runs
 * across nodes (the device Adasum between nodes, the two-level all-reduce) is tested on one
 * host in the ordinary suite.
 * defines: hvdc__fault, hvdc__fault_device_count, hvdc__fault_node_size
 * Any thread.
 */
#ifndef HVDC_FAULT_H
#define HVDC_FAULT_H

/* @return 1 if site is named in HVDC_TEST_FAULTS, else 0. */
int hvdc__fault(const char *site);

/* @return the n of HVDC_TEST_GPU_COUNT=n (0..64) if set, else real. */
int hvdc__fault_device_count(int real);

/* @return the k of HVDC_TEST_NODE_SIZE=k (1..1024) if set, else 0 (nodes are real). */
int hvdc__fault_node_size(void);

#endif
