"""Autograd through each collective, against Horovod 0.28's backward passes. Each rank r has a
loss L_r = sum(y_r * W_r) of the collective's output y_r with weights W_r that every rank can
compute, and the gradient each rank receives is derived by hand below from Horovod's rules:
allreduce's backward uses its own op; allgather's and broadcast's average the gradients over the
set (so they are 1/size of dL/dx_r for L = sum_r L_r); reducescatter's allgathers them, times
size for op=Sum. Float64, integer-valued weights: exact, except where a division by size
rounds (compared to 1 ulp there)."""
import torch

import hvdc.torch as hvd


def weights(r, shape, salt=0):
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n, dtype=torch.float64) * 3 + r * 7 + salt) % 11 + 1).view(shape)


def leaf(r, shape):
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64) + 10 * r).view(shape).requires_grad_()


def close(got, want):
    return torch.allclose(got, want, rtol=2 ** -52, atol=0)


def test_allreduce_sum_and_average(rank, size):
    for op in (hvd.Sum, hvd.Average):
        x = leaf(rank, (3, 2))
        y = hvd.allreduce(x, op=op)
        assert y.requires_grad and y.grad_fn is not None
        (y * weights(rank, (3, 2))).sum().backward()
        want = sum(weights(r, (3, 2)) for r in range(size))
        if op == hvd.Average:  # backward averages as the forward did: the sum * (1 / size)
            want = want * (1.0 / size)
        assert torch.equal(x.grad, want), (op, x.grad, want)


def test_allreduce_with_compression_and_scaling(rank, size):
    x = leaf(rank, (4,))
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, prescale_factor=0.5,
                      postscale_factor=2.0)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((4,), float(size)))


def test_grouped_allreduce(rank, size):
    xs = [leaf(rank, (2,)), leaf(rank, (3, 1))]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum(((y * weights(rank, y.shape, i)).sum() for i, y in enumerate(ys))).backward()
    for i, x in enumerate(xs):
        assert torch.equal(x.grad, sum(weights(r, x.shape, i) for r in range(size)))


def test_allgather(rank, size):
    x = leaf(rank, (rank + 1, 2))  # uneven first dimensions
    y = hvd.allgather(x)
    total = size * (size + 1) // 2
    assert y.shape == (total, 2)
    (y * weights(rank, (total, 2))).sum().backward()
    offset = rank * (rank + 1) // 2
    want = sum(weights(r, (total, 2)) for r in range(size))[offset:offset + rank + 1] / size
    assert close(x.grad, want), (x.grad, want)


def test_grouped_allgather(rank, size):
    xs = [leaf(rank, (rank + 1,)), leaf(rank, (1, 3))]
    ys = hvd.grouped_allgather(xs)
    sum((y * weights(rank, y.shape, i)).sum() for i, y in enumerate(ys)).backward()
    off0 = rank * (rank + 1) // 2
    assert close(xs[0].grad, sum(weights(r, ys[0].shape, 0) for r in range(size))[off0:off0 + rank + 1] / size)
    assert close(xs[1].grad, sum(weights(r, ys[1].shape, 1) for r in range(size))[rank:rank + 1] / size)


def test_broadcast(rank, size):
    root = size - 1
    x = leaf(rank, (5,))
    y = hvd.broadcast(x, root)
    (y * weights(rank, (5,))).sum().backward()
    want = sum(weights(r, (5,)) for r in range(size)) / size if rank == root else torch.zeros(5, dtype=torch.float64)
    assert close(x.grad, want), (x.grad, want)


def test_alltoall(rank, size):
    # rank s sends (s + d) % 2 + 1 rows to rank d
    splits = [(rank + d) % 2 + 1 for d in range(size)]
    x = leaf(rank, (sum(splits), 2))
    y, received = hvd.alltoall(x, splits=splits)
    assert received.tolist() == [(s + rank) % 2 + 1 for s in range(size)]
    (y * weights(rank, y.shape)).sum().backward()
    # the rows this rank sent to d come back as rank d's weights for the rows it got from us
    want = []
    for d in range(size):
        got_d = [(s + d) % 2 + 1 for s in range(size)]
        start = sum(got_d[:rank])
        want.append(weights(d, (sum(got_d), 2))[start:start + splits[d]])
    assert torch.equal(x.grad, torch.cat(want))


def test_reducescatter(rank, size):
    for op in (hvd.Sum, hvd.Average):
        rows = 2 * size + 1
        x = leaf(rank, (rows, 2))
        y = hvd.reducescatter(x, op=op)
        (y * weights(rank, y.shape)).sum().backward()
        base, extra = divmod(rows, size)
        want = torch.cat([weights(r, (base + (1 if r < extra else 0), 2)) for r in range(size)])
        if op == hvd.Sum:  # Horovod scales the gathered gradient by size for Sum, not Average
            want = want * size
        assert torch.equal(x.grad, want), op


def test_reducescatter_scale_factors(rank, size):
    x = leaf(rank, (2 * size, 1))
    y = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((2 * size, 1), size * 1.5, dtype=torch.float64))


def test_grouped_reducescatter(rank, size):
    for op in (hvd.Sum, hvd.Average):
        xs = [leaf(rank, (size + 1, 2)), leaf(rank, (2 * size,))]
        ys = hvd.grouped_reducescatter(xs, op=op, name=f"grs.{op}")
        assert all(y.grad_fn is not None for y in ys)
        sum((y * weights(rank, y.shape, i)).sum() for i, y in enumerate(ys)).backward()
        for i, x in enumerate(xs):
            base, extra = divmod(x.shape[0], size)
            rest = tuple(x.shape[1:])
            want = torch.cat([weights(r, (base + (1 if r < extra else 0),) + rest, i)
                              for r in range(size)])
            if op == hvd.Sum:
                want = want * size
            assert torch.equal(x.grad, want), (op, i, x.grad, want)


def test_no_grad_means_no_graph(rank, size):
    x = leaf(rank, (2,))
    with torch.no_grad():
        assert hvd.allreduce(x).grad_fn is None
    assert hvd.allreduce(x.detach()).grad_fn is None
