"""broadcast_parameters (state_dict, named_parameters, parameters), broadcast_optimizer_state
(tensor state, scalar state such as step and lr, ranks whose state does not exist yet),
broadcast_object and allgather_object, and the timeline started and stopped at run time."""
import json
import os
import tempfile
import threading

import pytest
import torch

import hvdc.torch as hvd


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))


def flat(m):
    return torch.cat([t.detach().float().reshape(-1) for t in m.state_dict().values()])


def test_broadcast_parameters_every_form(rank, size):
    root = size - 1
    for form in ("state_dict", "named_parameters", "parameters"):
        m = net(rank)
        m[1].running_mean.fill_(float(rank))  # a buffer: only state_dict carries it
        m[1].num_batches_tracked.fill_(rank)
        params = {"state_dict": m.state_dict(), "named_parameters": m.named_parameters(),
                  "parameters": list(m.parameters())}[form]
        hvd.broadcast_parameters(params, root_rank=root)
        got = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
        root_m = net(root)
        assert torch.equal(got, torch.cat([p.detach().reshape(-1) for p in root_m.parameters()])), form
        if form == "state_dict":
            assert torch.equal(m[1].running_mean, torch.full((5,), float(root))), "buffers"
            assert int(m[1].num_batches_tracked) == root


def step_on_own_data(opt, m, rank, steps):
    for s in range(steps):
        opt.zero_grad()
        m(torch.full((3, 4), float(rank + s + 1))).sum().backward()
        opt.step()


def test_broadcast_optimizer_state(rank, size):
    root = 0
    for make in (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                 lambda p: torch.optim.Adam(p, lr=0.01)):
        m = net(rank)
        opt = make(m.parameters())
        if rank == root:
            step_on_own_data(opt, m, rank, 3)  # root has state; the others have none yet
            opt.param_groups[0]["lr"] = 0.123    # a scalar option that must travel too
        hvd.broadcast_parameters(m.state_dict(), root_rank=root)
        hvd.broadcast_optimizer_state(opt, root_rank=root)
        assert opt.param_groups[0]["lr"] == 0.123
        state = opt.state_dict()["state"]
        assert len(state) > 0, "the state did not arrive"
        rows = hvd.allgather_object({k: {n: (v.tolist() if isinstance(v, torch.Tensor) else v)
                                         for n, v in s.items()} for k, s in state.items()})
        assert all(r == rows[root] for r in rows), "optimizer states differ after the broadcast"
        # and from here every rank steps alike
        step_on_own_data(opt, m, 0, 1)
        everyone = hvd.allgather_object(flat(m))
        assert all(torch.equal(r, everyone[0]) for r in everyone), 'parameters diverged'


def test_broadcast_and_allgather_object(rank, size):
    obj = {"rank": rank, "list": list(range(rank + 2)), "text": "x" * (100 * rank), "t": torch.ones(rank + 1)}
    for root in range(size):
        got = hvd.broadcast_object(obj, root_rank=root, name=f"obj.{root}")
        assert got["rank"] == root and got["list"] == list(range(root + 2))
        assert torch.equal(got["t"], torch.ones(root + 1))
    everyone = hvd.allgather_object(obj)
    assert [o["rank"] for o in everyone] == list(range(size))
    assert [len(o["text"]) for o in everyone] == [100 * r for r in range(size)]
    assert hvd.broadcast_object(None) is None


def test_timeline_start_stop(rank, size):
    path = hvd.broadcast_object(tempfile.mkstemp(suffix=".json")[1] if rank == 0 else None)
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(3), name="timeline.tensor")
    hvd.stop_timeline()
    if rank == 0:
        with open(path) as f:
            events = json.load(f)
        names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        assert "timeline.tensor" in names, names
        os.unlink(path)
    hvd.barrier()


def test_an_object_that_cannot_be_pickled_fails_every_rank(rank):
    """The rank that cannot pickle raises its own error; the others raise too instead of
    waiting for bytes that never come; the next collective works."""
    unpicklable = threading.Lock()
    with pytest.raises((TypeError, ValueError)):
        hvd.broadcast_object(unpicklable if rank == 0 else None, root_rank=0, name="obj.bad.bcast")
    with pytest.raises((TypeError, ValueError)):
        hvd.allgather_object(unpicklable if rank == 1 else rank, name="obj.bad.gather")
    assert hvd.broadcast_object(rank, root_rank=0, name="obj.after.bad") == 0


def test_broadcast_optimizer_state_with_frozen_parameters(rank, size):
    """Horovod's case: a frozen parameter (requires_grad=False) has no gradient and no state.
    A fresh optimizer, plain or distributed, is started as Horovod starts it (a zero gradient
    on every trainable parameter, one step of the wrapped optimizer), so the trainable one has
    a gradient, equal on every rank, and the frozen one keeps grad None."""
    for distributed in (False, True):
        torch.manual_seed(7 + rank)
        index = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
        weight = torch.nn.Parameter(torch.rand(4))
        opt = torch.optim.SGD([index, weight], lr=0.001, weight_decay=1e-6, momentum=0.9,
                              nesterov=True)
        if distributed:
            opt = hvd.DistributedOptimizer(opt, named_parameters=[("index", index),
                                                                  ("weight", weight)])
        hvd.broadcast_parameters({"index": index, "weight": weight}, root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert index.grad is None
        grad = opt.param_groups[0]["params"][1].grad
        assert isinstance(grad, torch.Tensor)
        assert torch.equal(grad, hvd.broadcast(grad, root_rank=0, name=f"frozen.{distributed}"))
        state = opt.state_dict()["state"]
        assert 0 not in state and 1 in state, state
        everyone = hvd.allgather_object(weight.detach().clone())
        assert all(torch.equal(w, everyone[0]) for w in everyone), "parameters differ"


def test_broadcast_optimizer_state_with_none_entries(rank, size):
    # SGD without momentum keeps momentum_buffer None in its state; None travels as a value
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.5)
    p.grad = torch.ones(3)
    opt.step()
    entries = opt.state_dict()["state"].get(0, {})
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.state_dict()["state"].get(0, {}) == entries


def test_broadcast_optimizer_state_model_keeps_the_parameters(rank, size):
    """model= (Horovod's argument): the start's one step of zero gradients moves parameters
    under decoupled weight decay (AdamW: p -= lr * wd * p); with the model given they are put
    back, so every rank holds the parameters it had (rank 0's, after broadcast_parameters)."""
    for given in (True, False):
        torch.manual_seed(11)
        net = torch.nn.Linear(4, 2)
        before = [p.detach().clone() for p in net.parameters()]
        opt = torch.optim.AdamW(net.parameters(), lr=0.1, weight_decay=0.5)
        hvd.broadcast_optimizer_state(opt, root_rank=0, model=net if given else None)
        moved = any(not torch.equal(p.detach(), b) for p, b in zip(net.parameters(), before))
        assert moved is not given, f"model given: {given}, parameters moved: {moved}"
        assert len(opt.state_dict()["state"]) == 2
    with pytest.raises(ValueError, match="model must be a torch.nn.Module"):
        hvd.broadcast_optimizer_state(torch.optim.SGD(net.parameters(), lr=1), 0, model="net")

