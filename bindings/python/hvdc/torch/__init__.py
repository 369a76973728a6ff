"""hvdc.torch: Horovod's PyTorch API on libhvdc. A script written for horovod.torch runs with

    import hvdc.torch as hvd

in place of `import horovod.torch as hvd`: the same names, arguments, defaults, return types,
in-place semantics and error types (HorovodInternalError for failed collectives, ValueError
for bad arguments). Adasum runs on host memory (op=hvd.Adasum, at a power-of-2 number of
ranks, as Horovod); GPU tensors get Horovod's GPU Adasum: on one node the average, across a
power-of-2 number of nodes Adasum between the nodes' averages (docs/pytorch.md). Elastic mode
(hvd.elastic.run, TorchState) is restart-based: see hvdc.torch.elastic.
Beyond Horovod: hvd.check_consistency(model, optimizer) names the tensors whose replicas
differ across ranks (hvdc.torch.consistency).
"""
from hvdc.common.basics import (init, shutdown, is_initialized, rank, size, local_rank,
                                local_size, cross_rank, cross_size, is_homogeneous,
                                mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
                                gloo_built, nccl_built, cuda_built, rocm_built, ddl_built,
                                ccl_built, sycl_built, start_timeline, stop_timeline)
from hvdc.common.basics import Average, Sum, Adasum, Min, Max, Product
from hvdc.common.diagnostics import report
from hvdc.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvdc.common.process_sets import (ProcessSet, global_process_set, add_process_set,
                                      remove_process_set)
from hvdc.torch.compression import Compression
from hvdc.torch.consistency import check_consistency
from hvdc.torch.mpi_ops import (allreduce_async, allreduce_async_, allreduce_,
                                grouped_allreduce_async, grouped_allreduce_async_,
                                grouped_allreduce_, sparse_allreduce_async,
                                allgather_async, grouped_allgather_async,
                                broadcast_async, broadcast_async_, broadcast_,
                                alltoall_async, reducescatter_async, grouped_reducescatter_async,
                                barrier, join, poll, synchronize)
from hvdc.torch.autograd import (allreduce, grouped_allreduce, allgather, grouped_allgather,
                                 broadcast, alltoall, reducescatter, grouped_reducescatter)
from hvdc.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                  broadcast_object, allgather_object)
from hvdc.torch.optimizer import DistributedOptimizer
from hvdc.torch.sync_batch_norm import SyncBatchNorm
from hvdc.torch import elastic
