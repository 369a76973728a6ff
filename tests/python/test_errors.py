"""Error cases of hvdc.torch, with Horovod's error types: mismatches across ranks raise
HorovodInternalError on every rank with libhvdc's message (the tensor, the field, the ranks);
arguments refused on one rank raise ValueError (TypeError for a non-tensor,
NotImplementedError for what Adasum does not support yet) and send nothing; calls before hvd.init() say to call it.
After each error the next collective must work (nothing is left half-done)."""
import os
import subprocess
import sys

import pytest
import torch

import hvdc.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))


def still_works(name):
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=name)
    assert torch.equal(got, torch.full((2,), float(hvd.size())))


def expect_mismatch(fn, name, field):
    with pytest.raises(hvd.HorovodInternalError) as e:
        fn()
    msg = str(e.value)
    assert name in msg and field in msg, f"the message does not name '{name}' and '{field}': {msg}"
    still_works(name + ".after")


@pytest.mark.skipif("hvd.size() < 2", reason="a mismatch needs two ranks")
def test_mismatches_raise_horovod_internal_error(rank):
    other = rank != 0
    expect_mismatch(lambda: hvd.allreduce(torch.ones(4 if other else 3), name="mm.count"),
                    "mm.count", "count")
    expect_mismatch(lambda: hvd.allreduce(torch.ones(3, dtype=torch.float64 if other else torch.float32),
                                          name="mm.dtype"), "mm.dtype", "dtype")
    expect_mismatch(lambda: hvd.allreduce(torch.ones(3), op=hvd.Max if other else hvd.Min,
                                          name="mm.op"), "mm.op", "op")
    expect_mismatch(lambda: hvd.broadcast(torch.ones(3), 1 if other else 0, name="mm.root"),
                    "mm.root", "root")
    if other:
        fn = lambda: hvd.broadcast(torch.ones(3), 0, name="mm.kind")  # noqa: E731
    else:
        fn = lambda: hvd.allreduce(torch.ones(3), name="mm.kind")  # noqa: E731
    expect_mismatch(fn, "mm.kind", "operation")
    # shapes, not only element counts, must agree, as Horovod checks them: the same 17 * 1311
    # elements shaped [17, 1311] on rank 0 and [17, 23, 57] elsewhere
    shape = (17, 23 * 57) if not other else (17, 23, 57)
    expect_mismatch(lambda: hvd.allreduce(torch.ones(shape), name="mm.shape"), "mm.shape",
                    "[17, 1311]")
    expect_mismatch(lambda: hvd.reducescatter(torch.ones(shape), name="mm.rs.shape"),
                    "mm.rs.shape", "[17, 23, 57]")
    expect_mismatch(lambda: hvd.broadcast(torch.ones(shape), 0, name="mm.bc.shape"),
                    "mm.bc.shape", "shape")
    # allgather and alltoall: all but the first dimension, with rows of as many elements
    rows = (4, 6) if not other else (4, 2, 3)
    expect_mismatch(lambda: hvd.allgather(torch.ones(rows), name="mm.ag.shape"), "mm.ag.shape",
                    "[*, 6]")
    expect_mismatch(lambda: hvd.alltoall(torch.ones((hvd.size(),) + rows[1:]), name="mm.a2a.shape"),
                    "mm.a2a.shape", "beyond the first dimension")
    # the first dimension of an allgather may differ (that is its point)
    got = hvd.allgather(torch.ones(rank + 1, 2, 3), name="mm.ag.rows.ok")
    assert got.shape == (hvd.size() * (hvd.size() + 1) // 2, 2, 3)
    # the rest of an allgather's shape must agree: rank 0 sends rows of 5, the others rows of 3
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.allgather(torch.ones(1, 3 if other else 5), name="mm.rows")
    assert "mm.rows" in str(e.value) and "rows" in str(e.value)
    still_works("mm.rows.after")


def test_local_argument_errors(rank, size):
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError):
        hvd.allreduce([1.0, 2.0])
    # Adasum's limits, as Horovod words them (tests/python/test_adasum.py runs it)
    with pytest.raises(ValueError, match="floating"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(RuntimeError):  # Horovod's reducescatter test catches RuntimeError
        hvd.reducescatter(torch.ones(2 * size), op=hvd.Adasum)
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)
    with pytest.raises(ValueError, match="bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Average)
    with pytest.raises(ValueError, match="numeric dtype, not bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, prescale_factor=2.0)
    with pytest.raises(ValueError, match="root"):
        hvd.broadcast(torch.ones(2), size)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(size + 1, 2), splits=[1] * (size + 1))
    if size > 1:
        with pytest.raises(ValueError, match="divisible"):
            hvd.alltoall(torch.ones(size + 1, 2))
    with pytest.raises(ValueError, match="rank 0"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(torch.ones(3).to_sparse())
    if size > 1:
        # a name in flight twice raises ValueError at the call, as Horovod's core does, for
        # every collective. Rank 0's first 'dup.*' cannot complete before rank 1 submits it,
        # which rank 1 does only after the barrier, which rank 0 reaches after its second try.
        submit = {
            "allreduce": lambda n: hvd.allreduce_async(torch.ones(2), name=n),
            "allgather": lambda n: hvd.allgather_async(torch.ones(2), name=n),
            "broadcast": lambda n: hvd.broadcast_async(torch.ones(2), 0, name=n),
            "reducescatter": lambda n: hvd.reducescatter_async(torch.ones(size * 2), name=n),
            "alltoall": lambda n: hvd.alltoall_async(torch.ones(size * 2), name=n),
        }
        handles = []
        if rank == 0:
            for kind, call in submit.items():
                handles.append(call("dup." + kind))
                with pytest.raises(ValueError, match="dup." + kind):
                    call("dup." + kind)
            hvd.barrier()
        else:
            hvd.barrier()
            handles = [call("dup." + kind) for kind, call in submit.items()]
        for h in handles:
            hvd.synchronize(h)
    with pytest.raises(ValueError, match="unique"):
        p = torch.nn.Parameter(torch.ones(1))
        q = torch.nn.Parameter(torch.ones(1))
        hvd.DistributedOptimizer(torch.optim.SGD([p, q], lr=0.1), named_parameters=[("a", p), ("a", q)])
    with pytest.raises(ValueError, match="not named"):
        p = torch.nn.Parameter(torch.ones(1))
        q = torch.nn.Parameter(torch.ones(1))
        hvd.DistributedOptimizer(torch.optim.SGD([p, q], lr=0.1), named_parameters=[("a", p)])
    with pytest.raises(ValueError, match="predivide"):
        hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1),
                                 op=hvd.Sum, gradient_predivide_factor=2.0)
    still_works("after.local.errors")


def test_calls_before_init_and_after_shutdown():
    """In a fresh process, outside mpirun: every call says to call hvd.init() first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    code = (
        "import torch, hvdc.torch as hvd\n"
        "def expect(fn):\n"
        "    try:\n"
        "        fn()\n"
        "    except ValueError as e:\n"
        "        assert 'hvd.init()' in str(e), str(e)\n"
        "    else:\n"
        "        raise AssertionError('no error')\n"
        "assert not hvd.is_initialized()\n"
        "for f in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank,\n"
        "          hvd.cross_size, hvd.is_homogeneous, hvd.mpi_threads_supported):\n"
        "    expect(f)\n"
        "expect(lambda: hvd.allreduce(torch.ones(2)))\n"
        "expect(lambda: hvd.broadcast_(torch.ones(2), 0))\n"
        "expect(lambda: hvd.allgather(torch.ones(2)))\n"
        "expect(hvd.barrier)\n"
        "hvd.init(); hvd.init()  # the second call does nothing, as in Horovod\n"
        "assert hvd.is_initialized() and hvd.size() == 1\n"
        "hvd.shutdown()\n"
        "expect(lambda: hvd.allreduce(torch.ones(2)))\n"
        "print('before-init OK')\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    assert run.returncode == 0 and "before-init OK" in run.stdout, run.stdout


def test_build_facts():
    assert hvd.mpi_built() and hvd.mpi_enabled() and hvd.mpi_threads_supported()
    assert not hvd.gloo_built() and not hvd.gloo_enabled()
    assert not hvd.rocm_built() and not hvd.ddl_built() and not hvd.ccl_built()
    assert not hvd.sycl_built()
    assert isinstance(hvd.is_homogeneous(), bool) and hvd.is_homogeneous()
    assert hvd.local_size() == hvd.size() and hvd.cross_size() == 1  # one host here
    # Horovod's types: nccl_built() is NCCL's version code (an int, 0 without NCCL), so that
    # `hvd.nccl_built() >= 2700` guards work; the others are bools
    nccl = hvd.nccl_built()
    assert type(nccl) is int and (nccl == 0) == (not hvd.cuda_built()), nccl
    assert nccl == 0 or nccl >= 20000, nccl
    for fn in (hvd.mpi_built, hvd.mpi_enabled, hvd.mpi_threads_supported, hvd.gloo_built,
               hvd.gloo_enabled, hvd.cuda_built, hvd.rocm_built, hvd.ddl_built, hvd.ccl_built,
               hvd.sycl_built, hvd.is_homogeneous, hvd.is_initialized):
        assert type(fn()) is bool, (fn.__name__, fn())


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="CUDA tensors need a GPU and a CUDA build of torch "
                           "(torch.cuda.is_available() is False here)")
def test_cuda_tensors(rank, size):
    x = torch.full((5,), float(rank + 1), device="cuda")
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum).cpu(), torch.full((5,), float(size * (size + 1) // 2)))
    assert hvd.broadcast(x, 0).cpu().eq(1).all()
    assert hvd.allgather(x.view(5, 1)).shape == (5 * size, 1)
