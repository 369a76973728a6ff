/*
 * dtype.h - facts about element types and reduce ops, and validation of user-given values.
 * defines: hvdc__dtype_valid, hvdc__dtype_is_float, hvdc__dtype_name, hvdc__op_valid, hvdc__op_name
 * Pure; any thread.
 */
#ifndef HVDC_DTYPE_H
#define HVDC_DTYPE_H

#include "hvdc.h"

int hvdc__dtype_valid(int dtype);
int hvdc__dtype_is_float(hvd_dtype dtype);
const char *hvdc__dtype_name(int dtype);
int hvdc__op_valid(int op);
const char *hvdc__op_name(int op);

#endif
