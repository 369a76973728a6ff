"""hvdc.torch.elastic: Horovod's TorchState and run over libhvdc's restart-based elastic state.
A commit is what a restart finds (a second state object stands in for the restarted process),
restore() and sync() give every rank rank 0's state, run() starts from the last commit, a
commit of another model is refused without touching the model, and reset callbacks run only
after a commit of another size. The restart itself, under hvdcrun --elastic, is the launcher
tests' (tests/launcher)."""
import os

import pytest
import torch

import hvdc.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def elastic_dir(tmp_path_factory):
    """One directory for the whole job: rank 0's, as hvdcrun --elastic gives every rank."""
    path = hvd.broadcast_object(str(tmp_path_factory.mktemp("elastic")) if hvd.rank() == 0 else None,
                                root_rank=0, name="elastic.dir")
    os.environ["HVD_ELASTIC_DIR"] = path
    yield path
    del os.environ["HVD_ELASTIC_DIR"]


def make(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(6, 3)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step(model, opt):
    opt.zero_grad()
    model(torch.ones(2, 6)).sum().backward()
    opt.step()


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_restore_without_commit_gives_rank_0s_state():
    model, opt = make(100 + hvd.rank())  # different on every rank
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank(), batch=0)
    assert state.restore() is False  # the directory is new: nothing committed yet
    want = hvd.broadcast(flat(model), root_rank=0, name="elastic.want0")
    assert torch.equal(flat(model), want) and state.epoch == 0


def test_commit_then_a_restart_restores_it():
    model, opt = make(1)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    state.sync()
    step(model, opt)
    state.epoch, state.batch = 2, 7
    state.commit()
    committed = flat(model).clone()
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    step(model, opt)  # progress after the commit, lost on a failure
    state.batch = 9
    assert not torch.equal(flat(model), committed)

    model2, opt2 = make(2)  # the restarted process: fresh objects
    state2 = hvd.elastic.TorchState(model2, opt2, epoch=0, batch=0)
    assert state2.restore() is True
    assert torch.equal(flat(model2), committed)
    assert (state2.epoch, state2.batch) == (2, 7)
    assert state2.committed_size == hvd.size()
    for p, m in zip(model2.parameters(), momentum):
        assert torch.equal(opt2.state[p]["momentum_buffer"], m)


def test_run_starts_from_the_last_commit():
    model, opt = make(3)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state, epochs):
        seen = (state.epoch, state.batch)
        for state.epoch in range(state.epoch, epochs):
            step(state.model, state.optimizer)
            state.commit()
        return seen

    assert train(state, 3) == (2, 7)  # the commit of the test before
    assert state.epoch == 2


def test_sync_gives_rank_0s_values():
    model, opt = make(10 + hvd.rank())
    state = hvd.elastic.ObjectState(count=hvd.rank() * 10)
    state.sync()
    assert state.count == 0
    tstate = hvd.elastic.TorchState(model, None)
    tstate.sync()
    assert torch.equal(flat(model), hvd.broadcast(flat(model), 0, name="elastic.want1"))


def test_reset_callbacks_only_after_another_size(monkeypatch):
    calls = []
    model, opt = make(4)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: calls.append(1)])
    assert state.restore() is True  # the last commit was written by this many ranks
    assert calls == []
    # as if the job had restarted on one rank more than wrote the commit
    monkeypatch.setattr(hvd.elastic, "size", lambda: hvd.size() + 1)
    assert state.restore() is True
    assert calls == [1]


def test_a_commit_of_another_model_is_refused():
    other = torch.nn.Linear(5, 4)
    before = flat(other).clone()
    state = hvd.elastic.TorchState(other, None)
    with pytest.raises(RuntimeError, match="size mismatch"):  # load_state_dict refuses it
        state.restore()
    # the C state gave every rank the blob, but torch refused it before changing anything
    assert torch.equal(flat(other), before)
