"""hvdc.torch.elastic: Horovod's elastic API for PyTorch (horovod/torch/elastic) on libhvdc's
restart-based elastic training: run, TorchState, ElasticSampler, and the common State and
ObjectState (hvdc.common.elastic has the contract and what differs from Horovod).

    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, state.batch):
                step(x, y)
                state.train_sampler.record_batch(state.batch, batch_size)
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0
            state.train_sampler.set_epoch(state.epoch + 1)

    train(state)

Under `hvdcrun --min-np ...` (elastic mode) a failure ends the processes and hvdcrun starts the
job again on the hosts that are up; run() then resumes from the last commit.
"""
from hvdc.common.elastic import State, run_fn
from hvdc.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from hvdc.torch.elastic.sampler import ElasticSampler
from hvdc.torch.elastic.state import ObjectState, TorchState


def run(func):
    """Horovod's decorator for an elastic training function (see hvdc.common.elastic.run_fn)."""
    return run_fn(func, _reset)


def _reset():
    """Horovod's in-process reset (shutdown, init); a restarted process needs none."""


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler"]
