"""horovod.torch.mpi_ops's names: scripts import them from there (`from horovod.torch.mpi_ops
import allreduce, size`), so hvdc.torch.mpi_ops holds what Horovod's does: the basics
(hvdc.common's), the _async and in-place collectives, barrier, join, poll and synchronize
(collectives.py), and the blocking, differentiable ones with their autograd Functions
(autograd.py). Nothing of its own: every name is one of those modules'.
"""
from hvdc.common.basics import (init, shutdown, is_initialized, start_timeline,  # noqa: F401
                                stop_timeline, size, local_size, cross_size, rank, local_rank,
                                cross_rank, is_homogeneous, mpi_threads_supported, mpi_enabled,
                                mpi_built, gloo_enabled, gloo_built, nccl_built, ddl_built,
                                ccl_built, cuda_built, rocm_built, sycl_built)
from hvdc.common.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                      add_process_set, remove_process_set)
from hvdc.torch.collectives import (Average, Sum, Adasum, Min, Max, Product,  # noqa: F401
                                    handle_average_backwards_compatibility,
                                    allreduce_async, allreduce_async_, allreduce_,
                                    grouped_allreduce_async, grouped_allreduce_async_,
                                    grouped_allreduce_, sparse_allreduce_async,
                                    allgather_async, grouped_allgather_async,
                                    broadcast_async, broadcast_async_, broadcast_,
                                    alltoall_async, reducescatter_async,
                                    grouped_reducescatter_async, barrier, join, poll, synchronize)
from hvdc.torch.autograd import (allreduce, grouped_allreduce, allgather,  # noqa: F401
                                 grouped_allgather, broadcast, alltoall, reducescatter,
                                 grouped_reducescatter, HorovodAllreduce, HorovodGroupedAllreduce,
                                 HorovodAllgather, HorovodGroupedAllgather, HorovodBroadcast,
                                 HorovodAlltoall, HorovodReducescatter,
                                 HorovodGroupedReducescatter)
