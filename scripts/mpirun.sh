#!/usr/bin/env bash
# mpirun.sh - mpirun with the settings this project's machines need: running as root is allowed,
# more ranks than cores are allowed (and then ranks yield the CPU while they wait).
# Usage: scripts/mpirun.sh -np 4 build/examples/train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
exec mpirun --oversubscribe --bind-to none "$@"
