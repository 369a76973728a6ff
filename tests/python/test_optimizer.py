"""DistributedOptimizer: after every step the parameters are bitwise identical on every rank,
and equal (within float tolerance) to one process training the same model on the
concatenated batch; for SGD with momentum, Adam, fp16 and bf16 compression, gradient
accumulation over 2 backward passes, groups, the predivide factor, op=Sum, explicit
synchronize with gradient clipping, sparse gradients (as sparse and as dense), a gradient
only some ranks produce; and Horovod's errors. Run at np 2 and 4 (and 1, where it must be
plain training)."""
import copy

import pytest
import torch

import hvdc.torch as hvd

LOCAL = 4  # rows per rank per step


def batch(step, r, pass_=0):
    g = torch.Generator().manual_seed(1000 * step + 10 * r + pass_)
    x = torch.randint(-4, 5, (LOCAL, 6), generator=g).float()
    y = torch.randint(-3, 4, (LOCAL, 3), generator=g).float()
    return x, y


def global_batch(step, size, pass_=0):
    xs, ys = zip(*[batch(step, r, pass_) for r in range(size)])
    return torch.cat(xs), torch.cat(ys)


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def assert_identical_on_every_rank(m, what):
    rows = hvd.allgather(flat(m).view(1, -1), name=f"identical.{what}")
    for r in range(1, rows.shape[0]):
        assert torch.equal(rows[r], rows[0]), f"{what}: rank {r}'s parameters differ from rank 0's"


def run(make_opt, steps=4, passes=1, tol=(1e-5, 1e-6), loss_scale=1.0, clip=None,
        what="", **dist_kwargs):
    """Trains a replica with DistributedOptimizer and a reference on the global batch."""
    rank, size = hvd.rank(), hvd.size()
    net = model(seed=100 + rank)  # different on every rank until broadcast
    ref = model(seed=100)         # rank 0's start: what broadcast_parameters gives everyone
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    assert torch.equal(flat(net), flat(ref)), "broadcast_parameters did not give rank 0's values"
    if callable(dist_kwargs.get("groups")):  # groups of this replica's parameter objects
        dist_kwargs["groups"] = dist_kwargs["groups"](list(net.parameters()))
    opt = hvd.DistributedOptimizer(make_opt(net.parameters()), named_parameters=net.named_parameters(),
                                   backward_passes_per_step=passes, **dist_kwargs)
    ref_opt = make_opt(ref.parameters())
    for step in range(steps):
        opt.zero_grad()
        ref_opt.zero_grad()
        for p in range(passes):
            x, y = batch(step, rank, p)
            torch.nn.functional.mse_loss(net(x), y).backward()
            gx, gy = global_batch(step, size, p)
            (torch.nn.functional.mse_loss(ref(gx), gy) * loss_scale).backward()
        if clip is not None:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        ref_opt.step()
        assert_identical_on_every_rank(net, f"{what} step {step}")
        assert torch.allclose(flat(net), flat(ref), rtol=tol[0], atol=tol[1]), \
            f"{what} step {step}: max |diff| {(flat(net) - flat(ref)).abs().max():.3g}"
    return opt


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def test_sgd_momentum():
    run(sgd, what="sgd")


def test_adam():
    run(lambda p: torch.optim.Adam(p, lr=0.01), what="adam")


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression(compression):
    run(sgd, compression=getattr(hvd.Compression, compression), tol=(2e-2, 2e-2), what=compression)


def test_accumulation_over_two_passes():
    run(sgd, passes=2, what="passes=2")


@pytest.mark.parametrize("groups", ["two", "lists"])
def test_groups(groups):
    if groups == "two":
        run(sgd, groups=2, what="groups=2")
    else:  # the two weights together, the biases each alone
        run(sgd, groups=lambda ps: [[ps[0], ps[2]]], what="groups=[[w1, w2]]")


def test_predivide_and_sum():
    run(sgd, gradient_predivide_factor=2.0, what="predivide")
    run(sgd, op=hvd.Sum, loss_scale=float(hvd.size()), what="op=Sum")


def test_synchronize_clip_skip_synchronize():
    run(sgd, clip=0.5, what="clip")


def test_zero_grad_between_backward_and_step():
    if hvd.size() == 1:
        pytest.skip("with one rank no all-reduce is pending (no hooks), so nothing to refuse")
    net = model(seed=1)
    opt = hvd.DistributedOptimizer(sgd(net.parameters()), named_parameters=net.named_parameters())
    x, y = batch(0, hvd.rank())
    torch.nn.functional.mse_loss(net(x), y).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()  # the pending all-reduces complete
    opt.zero_grad()


def test_user_subclass_of_the_returned_optimizer():
    """A subclass of the class DistributedOptimizer returns (a user's logging or scheduling
    wrapper) steps as the class does; its methods used to recurse forever. And super(type(opt),
    opt) stays the wrapped optimizer's class, as in Horovod: broadcast_optimizer_state steps it
    that way (a distributed step there would wait for gradients no rank sends)."""
    rank, size = hvd.rank(), hvd.size()
    net, ref = model(seed=100), model(seed=100)
    opt = hvd.DistributedOptimizer(sgd(net.parameters()), named_parameters=net.named_parameters())
    assert type(opt).__bases__ == (torch.optim.SGD,), f"bases {type(opt).__bases__}"
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    class Counted(type(opt)):
        def step(self, closure=None):
            self.steps += 1
            return super().step(closure)

    opt.__class__ = Counted
    opt.steps = 0
    ref_opt = sgd(ref.parameters())
    for step in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        x, y = batch(step, rank)
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        gx, gy = global_batch(step, size)
        torch.nn.functional.mse_loss(ref(gx), gy).backward()
        ref_opt.step()
    assert opt.steps == 2, f"the subclass's step ran {opt.steps} times"
    assert torch.allclose(flat(net), flat(ref), rtol=1e-5, atol=1e-6), "the subclass trained wrong"


@pytest.mark.parametrize("as_dense", [False, True])
def test_sparse_gradients(as_dense):
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(5)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    ref = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=as_dense)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    ids = [torch.tensor([(r * 3 + k) % 10 for k in range(4)]) for r in range(size)]
    opt.zero_grad()
    emb(ids[rank]).sum().backward()  # the average over ranks is the global sum / size
    opt.step()
    ref_opt.zero_grad()
    ref(torch.cat(ids)).sum().div(size).backward()
    ref_opt.step()
    assert torch.allclose(emb.weight, ref.weight, atol=1e-6)
    assert_identical_on_every_rank(emb, f"sparse as_dense={as_dense}")


def test_gradient_only_some_ranks_produce():
    """A parameter only rank 0 uses (a dynamic graph): the other ranks' hooks never fire for
    it, so their step() submits zeros in its place (synchronize's "missing" path), and every
    rank averages rank 0's gradient with those zeros. Two steps: the second runs after a step
    in which every hook had fired on rank 0 alone."""
    rank, size = hvd.rank(), hvd.size()
    used = torch.nn.Parameter(torch.zeros(3))
    branch = torch.nn.Parameter(torch.zeros(2))
    net = torch.nn.Module()
    net.register_parameter("used", used)
    net.register_parameter("branch", branch)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1.0),
                                   named_parameters=net.named_parameters())
    want_used, want_branch = torch.zeros(3), torch.zeros(2)
    for step in range(2):
        opt.zero_grad()
        xs = [torch.arange(3, dtype=torch.float32) + r + step for r in range(size)]
        loss = (used * xs[rank]).sum()
        if rank == 0:
            loss = loss + (branch * (step + 1.0)).sum()
        loss.backward()
        opt.step()
        want_used -= sum(xs) / size
        want_branch -= (step + 1.0) / size
        assert torch.equal(used.detach(), want_used), f"step {step}: used {used}, want {want_used}"
        assert torch.equal(branch.detach(), want_branch), \
            f"step {step}: branch {branch}, want {want_branch}"
        assert_identical_on_every_rank(net, f"branch step {step}")


def test_load_state_dict_restarts_the_pass_count():
    """Horovod's override: loading a state (a checkpoint, an elastic restore) in the middle of
    an accumulation forgets its gradients in flight and the passes counted, so the next step
    all-reduces two whole passes. Without it the count goes on from the first pass, the
    second round's second backward is one too many, and it raises."""
    rank, size = hvd.rank(), hvd.size()
    net = model(seed=100)
    opt = hvd.DistributedOptimizer(sgd(net.parameters()), named_parameters=net.named_parameters(),
                                   backward_passes_per_step=2)
    saved = opt.state_dict()
    x, y = batch(0, rank, 0)
    torch.nn.functional.mse_loss(net(x), y).backward()  # one pass of two
    opt.load_state_dict(saved)
    opt.zero_grad()
    for p in range(2):
        x, y = batch(1, rank, p)
        torch.nn.functional.mse_loss(net(x), y).backward()
    opt.step()
    assert_identical_on_every_rank(net, "after load_state_dict")


def test_blocking_ops_and_basics_in_mpi_ops():
    """Horovod's mpi_ops holds the basics and the blocking collectives too."""
    from hvdc.torch.mpi_ops import allreduce, broadcast, init, rank, size, Sum, HorovodAllreduce
    init()
    x = torch.full((3,), float(rank() + 1))
    assert torch.equal(allreduce(x, op=Sum, name="mpi_ops.allreduce"),
                       torch.full((3,), float(size() * (size() + 1) // 2)))
    assert torch.equal(broadcast(x, root_rank=0, name="mpi_ops.broadcast"), torch.ones(3))
    assert HorovodAllreduce is hvd.autograd.HorovodAllreduce
