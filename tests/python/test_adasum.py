"""op=hvd.Adasum against a direct reference of Horovod 0.28's Adasum, at np 2 and 4; at np 3
(not a power of 2) the refusal Horovod gives, on every rank, and the next op still works.

The reference folds the ranks as Horovod's vector-halving distance-doubling pairs them: a
binary tree over the ranks in order, combine(combine(x0, x1), combine(x2, x3)), each tensor on
its own, with

    combine(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b   (a coefficient is 1
                                                          where |.|^2 < sqrt(DBL_MIN), 1.5e-154)

computed in float64. libhvdc sums each dot product from every rank's slice of it, so the
coefficients differ from the reference's in their last bits: compared to a tolerance that is a
small multiple of the dtype's epsilon times the largest magnitude."""
import sys

import pytest
import torch

import hvdc.torch as hvd

SQRT_DBL_MIN = sys.float_info.min ** 0.5  # Horovod's sqrt_double_min


def combine(a, b):
    dot = float((a * b).sum())
    anorm, bnorm = float((a * a).sum()), float((b * b).sum())
    ac = 1.0 - dot / anorm * 0.5 if anorm >= SQRT_DBL_MIN else 1.0
    bc = 1.0 - dot / bnorm * 0.5 if bnorm >= SQRT_DBL_MIN else 1.0
    return ac * a + bc * b


def adasum_reference(xs):
    """Horovod's pairing: neighbours first, then pairs of pairs."""
    level = [x.double() for x in xs]
    while len(level) > 1:
        level = [combine(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def data(r, n, salt, dtype):
    g = torch.Generator().manual_seed(1000 * salt + r)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    if salt % 3 == 0:
        x += 2.0  # gradients that largely agree: the combine averages them
    return x.to(dtype)


def tolerance(dtype, want):
    eps = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    return eps * max(1.0, float(want.abs().max()))


power_of_2 = pytest.mark.skipif("hvd.size() & (hvd.size() - 1) != 0",
                                reason="Adasum runs at a power-of-2 number of ranks (as Horovod)")


@power_of_2
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_allreduce_matches_reference(rank, size, dtype):
    for salt, n in enumerate([1, 7, 1000, 4099]):
        want = adasum_reference([data(r, n, salt, dtype) for r in range(size)])
        got = hvd.allreduce(data(rank, n, salt, dtype), op=hvd.Adasum, name=f"ada.{dtype}.{n}")
        assert got.dtype == dtype and got.shape == (n,)
        err = float((got.double() - want).abs().max())
        assert err <= tolerance(dtype, want), f"n={n}: max error {err}"
        everyone = hvd.allgather(got.unsqueeze(0), name=f"ada.same.{dtype}.{n}")
        assert all(torch.equal(everyone[r], everyone[0]) for r in range(size)), \
            "ranks got different bits"


@power_of_2
def test_grouped_each_tensor_on_its_own(rank, size):
    """Fused tensors keep their own dot products: the same as reducing each alone."""
    lengths = [5, 300, 1, 64]
    xs = [data(rank, n, 10 + i, torch.float64) for i, n in enumerate(lengths)]
    xs[2].zero_()  # a zero tensor on every rank: the combine leaves it zero
    got = hvd.grouped_allreduce(xs, op=hvd.Adasum, name="ada.grouped")
    for i, n in enumerate(lengths):
        inputs = [data(r, n, 10 + i, torch.float64) for r in range(size)]
        if i == 2:
            inputs = [torch.zeros(n, dtype=torch.float64)] * size
        want = adasum_reference(inputs)
        assert float((got[i] - want).abs().max()) <= tolerance(torch.float64, want), i


@power_of_2
def test_orthogonal_gradients_add_and_equal_ones_average(rank, size):
    # one-hot vectors along different axes are orthogonal: Adasum adds them
    x = torch.zeros(size, dtype=torch.float64)
    x[rank] = 3.0
    assert torch.equal(hvd.allreduce(x, op=hvd.Adasum, name="ada.orth"),
                       torch.full((size,), 3.0, dtype=torch.float64))
    # the same vector on every rank: Adasum averages it
    y = torch.arange(1.0, 6.0, dtype=torch.float64)
    assert torch.allclose(hvd.allreduce(y, op=hvd.Adasum, name="ada.same"), y, rtol=1e-15, atol=0)


@power_of_2
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_tiny_collinear_gradients_are_averaged(rank, size, dtype):
    """Horovod's test_stability: rank r sends c_r * a, a vector of values near the dtype's
    smallest normal (float32 1.2e-38, float16 6.1e-5), c_r ~ N(0, 1); Adasum of collinear
    vectors is their average. Dot products and norms taken in the tensor's type underflow to
    0, and a norm^2 below 1e-8 was taken for zero: the result was the sum."""
    g = torch.Generator().manual_seed(2)
    tiny = torch.finfo(dtype).tiny
    a = torch.randn(1024, generator=g, dtype=torch.float64) * tiny
    c = torch.randn(size, generator=g, dtype=torch.float64)
    q = [(a * c[r]).to(dtype) for r in range(size)]
    want = torch.stack([x.double() for x in q]).mean(0)
    got = hvd.allreduce(q[rank], op=hvd.Adasum, name=f"ada.tiny.{dtype}")
    rel = float((got.double() - want).abs().max() / want.abs().max())
    assert rel <= (1e-5 if dtype == torch.float32 else 2e-2), \
        f"max error {rel:.3g} of the largest value; got/expected at the largest: " \
        f"{float(got.double()[want.abs().argmax()] / want[want.abs().argmax()]):.4g}"


@power_of_2
def test_distributed_optimizer_combines_the_updates(rank, size):
    """Horovod's delta optimizer: each rank steps on its own gradient; the parameters become
    start + Adasum(every rank's update), the same on every rank."""
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    batches = [torch.randn(8, 4, generator=torch.Generator().manual_seed(r)) for r in range(size)]
    model(batches[rank]).pow(2).sum().backward()
    opt.step()
    for name, p in model.named_parameters():
        updates = []
        for r in range(size):  # what rank r's SGD step changed
            ref = torch.nn.Linear(4, 3).double()
            with torch.no_grad():
                ref.weight.copy_(start["weight"])
                ref.bias.copy_(start["bias"])
            ref(batches[r].double()).pow(2).sum().backward()
            updates.append(-0.1 * dict(ref.named_parameters())[name].grad)
        want = start[name].double() + adasum_reference(updates)
        assert float((p.detach().double() - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max())), name
    everyone = hvd.allgather_object([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for other in everyone for a, b in zip(other, everyone[0]))


@pytest.mark.skipif("hvd.size() & (hvd.size() - 1) == 0", reason="needs a size that is not a power of 2")
def test_refused_at_a_size_that_is_not_a_power_of_2(rank, size):
    with pytest.raises(NotImplementedError, match="non-power of 2 ranks is not supported yet"):
        hvd.allreduce(torch.ones(3), op=hvd.Adasum, name="ada.np3")
    with pytest.raises(NotImplementedError, match="non-power of 2"):
        hvd.grouped_allreduce([torch.ones(3)], op=hvd.Adasum, name="ada.np3.grouped")
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="ada.np3.after")
    assert torch.equal(got, torch.full((3,), float(size)))


def test_refused_in_a_process_set(rank, size):
    if size < 2:
        pytest.skip("a process set other than the global one needs two ranks")
    ps = hvd.add_process_set([0]) if size > 1 else None
    try:
        if rank == 0:
            with pytest.raises(NotImplementedError, match="non-global process sets"):
                hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=ps)
        with pytest.raises(NotImplementedError, match="non-global process sets"):
            hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1),
                                     op=hvd.Adasum, process_set=ps)
    finally:
        hvd.remove_process_set(ps)
