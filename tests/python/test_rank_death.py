"""A rank dies mid-run: the survivors' collectives raise hvd.HorovodInternalError naming the
dead rank, within a bound, instead of hanging (libhvdc's liveness watch). Needs mpirun's
--enable-recovery so the launcher keeps the survivors; run without mpirun (this file starts the
3-rank job itself)."""
import os
import re
import subprocess
import sys

import hvdc.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND_S = 5.0


def test_survivors_raise_horovod_internal_error():
    assert hvd.size() == 1, "run this file without mpirun: it starts its own job"
    env = dict(os.environ)  # from before hvd.init(): see test_example_resume.py
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")
    run = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "--enable-recovery",
                          "-np", "3", sys.executable, os.path.join(HERE, "rank_death.py")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=90)
    for rank in (0, 1):
        m = re.search(rf'KILLTEST rank={rank} HorovodInternalError after_s=([\d.-]+) message="([^"]*)"',
                      run.stdout)
        assert m, f"rank {rank} raised no HorovodInternalError:\n{run.stdout[-3000:]}"
        assert "rank 2" in m.group(2), f"rank {rank}: the message does not name rank 2: {m.group(2)}"
        assert float(m.group(1)) <= BOUND_S, f"rank {rank} took {m.group(1)} s (bound {BOUND_S} s)"
