"""CUDA tensors through hvdc.torch: the device path (NCCL on the runtime's stream, the current
torch stream's event as the ready event) gives what the CPU path gives, for the ops, async
handles, a process set of every rank and one DistributedOptimizer step. One GPU per rank; every
test skips with the reason where torch has no CUDA device (Debian's torch, or more ranks than
GPUs: NCCL refuses two ranks on one GPU)."""
import pytest
import torch

import hvdc.torch as hvd
from conftest import ALL_DTYPES, value

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < hvd.local_size(),
    reason="needs one CUDA device per rank and a CUDA build of torch "
           f"(torch.cuda.is_available() is {torch.cuda.is_available()})")

# NCCL has no 16-bit integers: those move on the device but do not reduce (hvdc.h)
REDUCIBLE = [d for d in ALL_DTYPES if d not in (torch.int16,)]


def dev():
    return torch.device("cuda", hvd.local_rank())


def expected(dtype, op, shape, salt=0):
    inputs = [value(dtype, op, r, shape, salt) for r in range(hvd.size())]
    if dtype == torch.bool:
        stack = torch.stack([t.bool() for t in inputs])
        return stack.all(0) if op in (hvd.Min, hvd.Product) else stack.any(0)
    acc = torch.stack([t.double() for t in inputs])
    out = {hvd.Sum: acc.sum(0), hvd.Min: acc.min(0).values, hvd.Max: acc.max(0).values,
           hvd.Product: acc.prod(0), hvd.Average: acc.sum(0) / hvd.size()}[op]
    return out.to(dtype)


@pytest.mark.parametrize("dtype", REDUCIBLE, ids=str)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Product, hvd.Average],
                         ids=["sum", "min", "max", "prod", "avg"])
def test_allreduce(dtype, op):
    if dtype == torch.bool and op == hvd.Average:
        pytest.skip("average of bool is refused (test_errors)")
    if op == hvd.Average and not dtype.is_floating_point:
        pytest.skip("integer average truncates: covered on the CPU")
    shape = (3, 1031)  # odd: not a multiple of any vector width
    x = value(dtype, op, hvd.rank(), shape).to(dev())
    want = expected(dtype, op, shape)

    def same(got):  # an average divides in the device's order: the last bit may differ
        if op == hvd.Average:
            return torch.allclose(got.double(), want.double(), rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)
        return torch.equal(got, want)

    got = hvd.allreduce(x, op=op, name=f"cuda.ar.{dtype}.{op}")
    assert got.device == x.device
    assert same(got.cpu()), (dtype, op)
    y = x.clone()
    hvd.allreduce_(y, op=op, name=f"cuda.ar_.{dtype}.{op}")
    assert same(y.cpu()), (dtype, op)


def test_async_grouped_and_scaled():
    xs = [value(torch.float32, hvd.Sum, hvd.rank(), (n,), salt=n).to(dev()) for n in (1, 7, 4099)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"cuda.async.{i}") for i, x in enumerate(xs)]
    for i, h in enumerate(handles):
        got = hvd.synchronize(h)
        assert torch.equal(got.cpu(), expected(torch.float32, hvd.Sum, (xs[i].numel(),), salt=xs[i].numel()))
    group = hvd.grouped_allreduce(xs, op=hvd.Sum, name="cuda.grouped")
    for x, g in zip(xs, group):
        assert torch.equal(g.cpu(), expected(torch.float32, hvd.Sum, (x.numel(),), salt=x.numel()))
    scaled = hvd.allreduce(xs[2], op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, name="cuda.scaled")
    assert torch.allclose(scaled.cpu(), expected(torch.float32, hvd.Sum, (4099,), salt=4099) * 2.0)


def test_adasum_and_integer_scaling_on_the_device():
    # Horovod's GPU Adasum on one node is the average (NCCL sum, then / local size)
    x = value(torch.float32, hvd.Average, hvd.rank(), (1001,), salt=3).to(dev())
    got = hvd.allreduce(x, op=hvd.Adasum, name="cuda.adasum")
    assert torch.allclose(got.cpu(), expected(torch.float32, hvd.Average, (1001,), salt=3),
                          rtol=1e-6, atol=1e-6)
    # integers take scale factors on the device as on the host: in float64, truncated
    n = 4 * hvd.size() + 1
    xs = [((torch.arange(n) * 7 + r * 5) % 23 - 9).to(torch.int32) for r in range(hvd.size())]
    want = torch.trunc(sum(torch.trunc(t.double() * 0.5) for t in xs) * 3.0).to(torch.int32)
    got = hvd.allreduce(xs[hvd.rank()].to(dev()), op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0, name="cuda.int.scaled")
    assert torch.equal(got.cpu(), want)


def test_work_on_a_side_stream():
    """The ready event orders libhvdc's stream after the producer's stream, without a host sync."""
    side = torch.cuda.Stream(device=dev())
    with torch.cuda.stream(side):
        x = torch.full((1 << 20,), float(hvd.rank() + 1), device=dev())
        for _ in range(20):  # long enough that a missing dependency would read stale data
            x = x * 1.0
        got = hvd.allreduce(x, op=hvd.Sum, name="cuda.side")
    torch.cuda.synchronize()
    assert got.cpu().eq(hvd.size() * (hvd.size() + 1) / 2).all()


def test_movers():
    x = value(torch.float32, hvd.Sum, hvd.rank(), (5, 3)).to(dev())
    b = hvd.broadcast(x, root_rank=0, name="cuda.bcast")
    assert torch.equal(b.cpu(), value(torch.float32, hvd.Sum, 0, (5, 3)))
    g = hvd.allgather(x, name="cuda.gather")
    assert g.shape == (5 * hvd.size(), 3) and g.device == x.device
    assert torch.equal(g[5 * hvd.rank():5 * hvd.rank() + 5].cpu(), x.cpu())
    send = torch.arange(2 * hvd.size(), dtype=torch.float32, device=dev()) + 100 * hvd.rank()
    out = hvd.alltoall(send, name="cuda.alltoall")  # as Horovod: no splits given, no splits back
    assert out.device == send.device
    assert out.cpu().tolist() == [2 * hvd.rank() + k + 100 * r for r in range(hvd.size()) for k in (0, 1)]
    out, splits = hvd.alltoall(send, splits=[2] * hvd.size(), name="cuda.alltoall.splits")
    assert out.numel() == 2 * hvd.size() and splits.tolist() == [2] * hvd.size()
    rs = hvd.reducescatter(torch.ones(4 * hvd.size(), device=dev()), op=hvd.Sum, name="cuda.rs")
    assert rs.cpu().eq(hvd.size()).all() and rs.numel() == 4


def test_optimizer_step_matches_cpu():
    torch.manual_seed(1234)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    gpu_model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.to(dev())
    results = []
    for model, device in ((cpu_model, "cpu"), (gpu_model, dev())):
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=[(f"{device}.{n}", p) for n, p in model.named_parameters()])
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        torch.manual_seed(100 + hvd.rank())
        data, target = torch.randn(4, 16), torch.randn(4, 2)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data.to(device)), target.to(device)).backward()
        opt.step()
        results.append([p.detach().cpu() for p in model.parameters()])
    for c, g in zip(*results):
        assert torch.allclose(c, g, atol=1e-5), (c - g).abs().max()
