"""SyncBatchNorm against torch's BatchNorm on the concatenated batch: the same output rows, the
same running statistics, input gradients equal to those of the whole batch's loss, and weight
and bias gradients that sum over the ranks to the whole batch's. Float64, so the comparison is
tight; rank r has r + 2 rows (uneven parts)."""
import torch

import hvdc.torch as hvd


def part(r, dims):
    g = torch.Generator().manual_seed(77 + r)
    return torch.randn((r + 2, 3) + dims, generator=g, dtype=torch.float64) * (r + 1) + r


def weights(r, shape):
    g = torch.Generator().manual_seed(500 + r)
    return torch.randn(shape, generator=g, dtype=torch.float64)


def test_matches_batch_norm_on_the_whole_batch(rank, size):
    for dims in [(), (4,), (2, 3)]:
        bn_cls = {0: torch.nn.BatchNorm1d, 1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d}[len(dims)]
        sync = hvd.SyncBatchNorm(3).double()
        ref = bn_cls(3).double()
        with torch.no_grad():
            for m in (sync, ref):
                m.weight.copy_(torch.tensor([1.5, -0.5, 2.0]))
                m.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
        x = part(rank, dims).requires_grad_()
        y = sync(x)
        (y * weights(rank, y.shape)).sum().backward()

        xs = [part(r, dims).requires_grad_() for r in range(size)]
        whole = torch.cat(xs)
        out = ref(whole)
        rows = [r + 2 for r in range(size)]
        (out * torch.cat([weights(r, (rows[r], 3) + dims) for r in range(size)])).sum().backward()
        start = sum(rows[:rank])
        assert torch.allclose(y, out[start:start + rows[rank]], atol=1e-10), f"output {dims}"
        assert torch.allclose(x.grad, xs[rank].grad, atol=1e-9), f"input gradient {dims}"
        assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-12), "running mean"
        assert torch.allclose(sync.running_var, ref.running_var, atol=1e-12), "running var"
        grads = hvd.allreduce(torch.cat([sync.weight.grad, sync.bias.grad]), op=hvd.Sum)
        assert torch.allclose(grads, torch.cat([ref.weight.grad, ref.bias.grad]), atol=1e-9)
        sync.eval()  # eval: the running statistics, no communication
        ref.eval()
        assert torch.allclose(sync(x.detach()), ref(x.detach()), atol=1e-12)


def test_convert_and_float32(rank, size):
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(model[1], hvd.SyncBatchNorm)
    x = torch.ones(2, 1, 5, 5) * (rank + 1)
    y = model(x)
    assert y.dtype == torch.float32 and y.shape == (2, 2, 3, 3)
    y.sum().backward()
    assert model[0].weight.grad is not None
