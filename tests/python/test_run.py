"""hvdc.run, Horovod's horovod.run: a function defined here (in the test module, sent by
cloudpickle or pickle) runs on every rank of a new job that hvdcrun starts, and each rank's
result comes back in rank order, also a large one (1 MiB); a rank that raises fails the job
with RuntimeError, as horovod.run does. Runs with no launcher around it ('own')."""
import pytest

import hvdc


def train(scale, offset=0):
    import torch
    import hvdc.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="run.sum")
    result = (hvd.rank(), hvd.size(), scale * total.item() + offset, b"x" * (1 << 20))
    hvd.shutdown()
    return result


def fails():
    import hvdc.torch as hvd
    hvd.init()
    raise ValueError("rank %d gives up" % hvd.rank())


def test_results_in_rank_order():
    results = hvdc.run(train, args=(2.0,), kwargs={"offset": 1}, num_proc=3)
    assert [r[:3] for r in results] == [(r, 3, 13.0) for r in range(3)]
    assert all(r[3] == b"x" * (1 << 20) for r in results)


def test_a_failing_rank_fails_the_run():
    with pytest.raises(RuntimeError, match="hvdcrun failed with exit code"):
        hvdc.run(fails, num_proc=2)
    # Horovod's argument checks, before anything starts; np is its deprecated num_proc
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="only allow one"):
        hvdc.run(train, args=(1.0,), np=2, hosts="localhost:2", hostfile="hosts")
