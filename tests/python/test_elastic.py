"""hvdc.torch.elastic: Horovod's State contract (save, restore, sync, reset, on_reset, commit,
check_host_updates), TorchState and ElasticSampler over libhvdc's restart-based elastic state.
A commit is what a restart finds (a second state object stands in for the restarted process:
resume() loads it and restore()s it); restore() undoes what followed the last save; sync()
gives every rank rank 0's values; run() resumes, calls on_reset() on a restart (Horovod's
reset event) and syncs; a host change asked for by hvdcrun (DIR/stop.request) is taken by the
next check_host_updates() on every rank, after committing the current values. The restart
itself, under hvdcrun, is the launcher tests' (tests/launcher, tests/two_hosts.sh)."""
import os

import pytest
import torch

import hvdc.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def elastic_dir(tmp_path_factory):
    """One directory for the whole job: rank 0's, as hvdcrun --min-np gives every rank."""
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


def test_no_commit_yet_then_sync_gives_rank_0s_state():
    model, opt = make(100 + hvd.rank())  # different on every rank
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank(), batch=0)
    assert state.resume() is False  # the directory is new: nothing committed yet
    state.sync()
    want = hvd.broadcast(flat(model), root_rank=0, name="elastic.want0")
    assert torch.equal(flat(model), want) and state.epoch == 0


def test_restore_undoes_what_followed_the_last_save():
    model, opt = make(7)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    saved = flat(model).clone()
    step(model, opt)
    state.batch = 5
    state.restore()
    assert torch.equal(flat(model), saved) and state.batch == 0


def test_commit_then_a_restart_resumes_it():
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
    assert state2.resume() is True
    assert torch.equal(flat(model2), committed)
    assert (state2.epoch, state2.batch) == (2, 7)
    assert state2.committed_size == hvd.size()
    for p, m in zip(model2.parameters(), momentum):
        assert torch.equal(opt2.state[p]["momentum_buffer"], m)


class CountingState(hvd.elastic.TorchState):
    """A user's own State, as Horovod's users write them: an extra value kept by overriding
    save/restore/sync/reset, each calling Horovod's."""

    def __init__(self, model, optimizer, **kwargs):
        self.best = 0.0
        self._saved_best = 0.0
        self.resets = 0
        super().__init__(model, optimizer, **kwargs)

    def save(self):
        self._saved_best = self.best
        super().save()

    def restore(self):
        self.best = self._saved_best
        super().restore()

    def sync(self):
        self.best = hvd.broadcast_object(self.best, root_rank=0)
        super().sync()

    def reset(self):
        self.resets += 1


def test_a_subclass_keeps_its_own_values_across_a_restart(monkeypatch):
    model, opt = make(3)
    state = CountingState(model, opt, epoch=0)
    calls = []
    state.register_reset_callbacks([lambda: calls.append(hvd.size())])
    state.best = 0.5
    state.commit()
    state.best = 0.9  # after the commit: not kept
    fresh = CountingState(*make(4), epoch=0)
    fresh.register_reset_callbacks([lambda: calls.append(hvd.size())])
    monkeypatch.setenv("HVD_ELASTIC_RESTART", "1")  # what hvdcrun sets on a restart

    @hvd.elastic.run
    def train(s):
        return s.best, s.resets

    assert train(fresh) == (0.5, 1)  # the commit's value; reset() ran once, then callbacks
    assert calls == [hvd.size()]
    monkeypatch.setenv("HVD_ELASTIC_RESTART", "0")  # a first run: no reset event
    again = CountingState(*make(5), epoch=0)
    assert train(again) == (0.5, 0)


def test_sync_gives_rank_0s_values():
    model, opt = make(10 + hvd.rank())
    state = hvd.elastic.ObjectState(count=hvd.rank() * 10)
    state.sync()
    assert state.count == 0
    tstate = hvd.elastic.TorchState(model, None)
    tstate.sync()
    assert torch.equal(flat(model), hvd.broadcast(flat(model), 0, name="elastic.want1"))


def test_sampler_goes_on_with_the_rest_of_the_epoch():
    """ElasticSampler in a TorchState: the committed position survives a restart, and the rest
    of the epoch is dealt over the ranks there are then; the ranks' shares partition it."""
    data = list(range(48))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    state = hvd.elastic.TorchState(None, None, sampler=sampler, batch=0)
    order = []
    for batch in range(2):  # two global batches of 2 per rank
        mine = list(sampler)[batch * 2:batch * 2 + 2]
        order += [x for share in hvd.allgather_object(mine) for x in share]
        sampler.record_batch(batch, 2)
        state.batch = batch + 1
    state.commit()
    fresh = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    state2 = hvd.elastic.TorchState(None, None, sampler=fresh, batch=0)
    assert state2.resume() is True and state2.batch == 2
    assert fresh.processed_num == 4 * hvd.size() and len(fresh) == -(-(48 - 4 * hvd.size()) // hvd.size())
    rest = [x for share in hvd.allgather_object(list(fresh)) for x in share]
    if (48 - 4 * hvd.size()) % hvd.size() == 0:  # no padding: each sample exactly once
        assert sorted(order + rest) == data
    fresh.set_epoch(1)
    assert fresh.processed_num == 0 and fresh.epoch == 1


def test_check_host_updates_stops_every_rank_after_committing(elastic_dir):
    model, opt = make(6)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    state.check_host_updates()  # nothing asked: goes on
    if hvd.rank() == 0:
        open(os.path.join(elastic_dir, "stop.request"), "w").write("test: hosts changed\n")
    step(model, opt)
    state.batch = 11  # not committed yet: the stop must keep it
    with pytest.raises(hvd.HostsUpdatedInterrupt):
        state.check_host_updates()
    if hvd.rank() == 0:
        assert os.path.exists(os.path.join(elastic_dir, "stop.ack"))  # taken, for hvdcrun
        os.unlink(os.path.join(elastic_dir, "stop.ack"))
    again = hvd.elastic.TorchState(*make(8), epoch=0, batch=0)
    assert again.resume() and again.batch == 11 and torch.equal(flat(again.model), flat(model))


def test_a_commit_of_another_model_is_refused():
    other = torch.nn.Linear(5, 4)
    before = flat(other).clone()
    state = hvd.elastic.TorchState(other, None)
    with pytest.raises(RuntimeError, match="size mismatch"):  # load_state_dict refuses it
        state.resume()
    assert torch.equal(flat(other), before)
