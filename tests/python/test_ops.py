"""The collectives of hvdc.torch with every dtype: allreduce (every op, out of place, in place,
sync, async, scaled, named every step), grouped_allreduce, sparse_allreduce_async, allgather
(uneven first dimensions), grouped_allgather, broadcast (every root), alltoall (with and
without splits), reducescatter (even and uneven), grouped_reducescatter, barrier, join (uneven
steps), poll and synchronize, non-contiguous tensors. Every rank runs every test; results are
compared with a reference computed locally from every rank's input (conftest.value /
reference)."""
import threading

import pytest
import torch

import hvdc.torch as hvd
from conftest import ALL_DTYPES, FLOATS, reference, value

OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
SHAPE = (5, 3)


def defined(dtype, op):
    return not (dtype == torch.bool and op == hvd.Average)


def assert_same(got, want, what):
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}: got {got.flatten()[:8]}, expected {want.flatten()[:8]}"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_allreduce_every_op(dtype, rank, size):
    for k, op in enumerate(OPS):
        if not defined(dtype, op):
            continue
        want = reference(dtype, op, size, SHAPE, salt=k)
        x = value(dtype, op, rank, SHAPE, salt=k)
        kept = x.clone()
        what = f"allreduce {dtype} op {op}"
        assert_same(hvd.allreduce(x, op=op), want, what + " out of place")
        assert torch.equal(x, kept), what + ": the input was modified"
        assert_same(hvd.synchronize(hvd.allreduce_async(x, op=op, name=f"ar.a.{dtype}.{op}")),
                    want, what + " async")
        y = x.clone()
        out = hvd.allreduce_(y, op=op)
        assert out is y, what + ": allreduce_ must return its input"
        assert_same(y, want, what + " in place")
        y = x.clone()
        h = hvd.allreduce_async_(y, op=op, name=f"ar.ai.{dtype}.{op}")
        assert hvd.synchronize(h) is y
        assert_same(y, want, what + " async in place")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_allreduce_scaled_and_average_default(dtype, rank, size):
    x = value(dtype, hvd.Sum, rank, SHAPE, salt=9)
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
    assert_same(got, reference(dtype, hvd.Sum, size, SHAPE, 9, 0.5, 4.0), "scaled sum")
    assert_same(hvd.allreduce(x), reference(dtype, hvd.Average, size, SHAPE, 9), "default op")
    with pytest.warns(DeprecationWarning):
        assert_same(hvd.allreduce(x, average=False), reference(dtype, hvd.Sum, size, SHAPE, 9),
                    "average=False")


def test_allreduce_non_contiguous(rank, size):
    base = value(torch.float32, hvd.Sum, rank, (4, 6)).t()  # a transposed view
    assert not base.is_contiguous()
    want = reference(torch.float32, hvd.Sum, size, (4, 6)).t()
    assert torch.equal(hvd.allreduce(base, op=hvd.Sum), want)
    hvd.allreduce_(base, op=hvd.Sum)
    assert torch.equal(base, want), "in place on a transposed view"


def test_allreduce_named_every_step(rank, size):
    """A named blocking all-reduce repeated every step (once cached, it runs on the calling
    thread: libhvdc's caller's path): float32 sums whose bits depend on the order of the fold
    equal the rank-order fold, out of place, in place, on a transposed view, and scaled."""
    def x_of(r, step):
        i = torch.arange(301, dtype=torch.float64)
        exps = ((r * 7919 + i * 104729 + step * 31) % 41 - 20)
        return (torch.ldexp(1.0 + ((r * 13 + i * 7 + step) % 97) / 97.0, exps)).float()

    def folded(step, pre=1.0, post=1.0):
        acc = x_of(0, step) * pre
        for r in range(1, size):
            acc = acc + x_of(r, step) * pre
        return acc * post

    for step in range(60):
        want = folded(step)
        assert torch.equal(hvd.allreduce(x_of(rank, step), op=hvd.Sum, name="steps.sum"), want), \
            f"step {step}: out of place"
        y = x_of(rank, step)
        assert hvd.allreduce_(y, op=hvd.Sum, name="steps.inplace") is y
        assert torch.equal(y, want), f"step {step}: in place"
        view = x_of(rank, step).reshape(7, 43).t()
        hvd.allreduce_(view, op=hvd.Sum, name="steps.view")
        assert torch.equal(view, want.reshape(7, 43).t()), f"step {step}: transposed view"
        got = hvd.allreduce(x_of(rank, step), op=hvd.Sum, name="steps.scaled",
                            prescale_factor=0.5, postscale_factor=3.0)
        assert torch.equal(got, folded(step, 0.5, 3.0)), f"step {step}: scaled"


def test_grouped_allreduce(rank, size):
    shapes = [(3,), (2, 2), (0,), (7,)]
    dtypes = [torch.float32, torch.float32, torch.int64, torch.float16]  # two dtypes mixed
    xs = [value(d, hvd.Sum, rank, s, salt=i) for i, (d, s) in enumerate(zip(dtypes, shapes))]
    wants = [reference(d, hvd.Sum, size, s, salt=i) for i, (d, s) in enumerate(zip(dtypes, shapes))]
    for got, want in zip(hvd.grouped_allreduce(xs, op=hvd.Sum), wants):
        assert_same(got, want, "grouped_allreduce")
    outs = hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum, name="grp.async"))
    for got, want in zip(outs, wants):
        assert_same(got, want, "grouped_allreduce_async")
    ys = [x.clone() for x in xs]
    assert all(a is b for a, b in zip(hvd.grouped_allreduce_(ys, op=hvd.Sum), ys))
    for got, want in zip(ys, wants):
        assert_same(got, want, "grouped_allreduce_")
    ys = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum))
    for got, want in zip(ys, wants):
        assert_same(got, want, "grouped_allreduce_async_")


def test_sparse_allreduce(rank, size):
    dense = torch.zeros(6, 2)
    dense[rank % 6] = rank + 1
    dense[(rank + 2) % 6, 1] = 2 * rank
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Sum)
    got = hvd.synchronize(handle)
    assert got.is_sparse
    assert torch.equal(got.to_dense(), hvd.allreduce(dense, op=hvd.Sum))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_allgather_uneven(dtype, rank, size):
    x = value(dtype, hvd.Max, rank, (rank + 1, 3))  # rank r contributes r + 1 rows
    kept = x.clone()
    want = torch.cat([value(dtype, hvd.Max, r, (r + 1, 3)) for r in range(size)])
    assert_same(hvd.allgather(x), want, f"allgather {dtype}")
    assert torch.equal(x, kept), "allgather modified its input"
    assert_same(hvd.synchronize(hvd.allgather_async(x, name=f"ag.{dtype}")), want, "async")
    empty_on_0 = value(dtype, hvd.Max, rank, (0 if rank == 0 else 2,))
    want = torch.cat([value(dtype, hvd.Max, r, (0 if r == 0 else 2,)) for r in range(size)])
    assert_same(hvd.allgather(empty_on_0), want, "allgather with rank 0 empty")


def test_grouped_allgather(rank, size):
    xs = [value(torch.int32, hvd.Max, rank, (rank + 1, 2)), value(torch.float64, hvd.Max, rank, (1,))]
    outs = hvd.grouped_allgather(xs)
    assert_same(outs[0], torch.cat([value(torch.int32, hvd.Max, r, (r + 1, 2)) for r in range(size)]), "0")
    assert_same(outs[1], torch.cat([value(torch.float64, hvd.Max, r, (1,)) for r in range(size)]), "1")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_broadcast_every_root(dtype, rank, size):
    for root in range(size):
        x = value(dtype, hvd.Max, rank, SHAPE, salt=root)
        kept = x.clone()
        want = value(dtype, hvd.Max, root, SHAPE, salt=root)
        assert_same(hvd.broadcast(x, root), want, f"broadcast {dtype} from {root}")
        assert torch.equal(x, kept), "broadcast modified its input"
        assert_same(hvd.synchronize(hvd.broadcast_async(x, root, name=f"bc.{dtype}.{root}")),
                    want, "async")
        y = x.clone()
        assert hvd.broadcast_(y, root) is y
        assert_same(y, want, "in place")
        y = x.clone()
        hvd.synchronize(hvd.broadcast_async_(y, root))
        assert_same(y, want, "async in place")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_alltoall(dtype, rank, size):
    # rank s sends (s + d) % 3 rows to rank d, each row tagged with s and d
    splits = [(rank + d) % 3 for d in range(size)]
    rows = [value(dtype, hvd.Max, rank, (splits[d], 2), salt=d) for d in range(size)]
    x = torch.cat(rows)
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    want = torch.cat([value(dtype, hvd.Max, s, ((s + rank) % 3, 2), salt=rank) for s in range(size)])
    assert_same(out, want, f"alltoall {dtype}")
    assert received.tolist() == [(s + rank) % 3 for s in range(size)], received
    even = value(dtype, hvd.Max, rank, (2 * size, 2), salt=7)
    got = hvd.alltoall(even)  # no splits: equal parts, and only the output comes back
    want = torch.cat([value(dtype, hvd.Max, s, (2 * size, 2), salt=7)[2 * rank:2 * rank + 2]
                      for s in range(size)])
    assert_same(got, want, "alltoall without splits")
    out, received = hvd.synchronize(hvd.alltoall_async(even, name=f"a2a.{dtype}"))
    assert_same(out, want, "alltoall_async")
    assert received.tolist() == [2] * size


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16, torch.int16], ids=str)
def test_reducescatter(dtype, rank, size):
    for rows, op in [(2 * size, hvd.Sum), (2 * size + 1, hvd.Sum), (2 * size + 1, hvd.Average),
                     (size + 3, hvd.Max)]:
        for trailing in [(), (3,)]:
            shape = (rows,) + trailing
            full = reference(dtype, op, size, shape, salt=rows)
            base, extra = divmod(rows, size)
            first = rank * base + min(rank, extra)
            mine = base + (1 if rank < extra else 0)
            got = hvd.reducescatter(value(dtype, op, rank, shape, salt=rows), op=op)
            assert_same(got, full[first:first + mine], f"reducescatter {dtype} {shape} op {op}")


def test_grouped_reducescatter(rank, size):
    xs = [value(torch.float32, hvd.Sum, rank, (2 * size, 2)), value(torch.int64, hvd.Sum, rank, (size + 1,))]
    outs = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    for x_shape, dtype, got in [((2 * size, 2), torch.float32, outs[0]), ((size + 1,), torch.int64, outs[1])]:
        full = reference(dtype, hvd.Sum, size, x_shape)
        base, extra = divmod(x_shape[0], size)
        first = rank * base + min(rank, extra)
        assert_same(got, full[first:first + base + (1 if rank < extra else 0)], "grouped")


INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def horovod_int_scaling(inputs, dtype, op, size, pre, post):
    """Horovod's integer scale factors: each input * pre in float64 truncated to the dtype, the
    sum of those, then * post (an average: * post / size, one factor) truncated again."""
    info = torch.iinfo(dtype)

    def scaled(t, f):
        return torch.trunc(t.double() * f).clamp(info.min, info.max).to(torch.int64)
    total = sum(scaled(t, pre) for t in inputs)
    return scaled(total, post / size if op == hvd.Average else post).to(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_scale_factors(dtype, rank, size):
    """Integers with prescale/postscale are scaled in float64 and truncated, as Horovod does,
    on allreduce, grouped_allreduce, reducescatter and grouped_reducescatter."""
    def x_of(r, n):
        return ((torch.arange(n) * 7 + r * 5) % 23 - (0 if dtype == torch.uint8 else 9)).to(dtype)
    for op, pre, post in [(hvd.Sum, 0.5, 3.0), (hvd.Average, 0.5, 0.75), (hvd.Sum, 1.0, 2.5)]:
        n = 4 * size + 1
        want = horovod_int_scaling([x_of(r, n) for r in range(size)], dtype, op, size, pre, post)
        what = f"{dtype} op {op} pre {pre} post {post}"
        got = hvd.allreduce(x_of(rank, n), op=op, prescale_factor=pre, postscale_factor=post,
                            name=f"ints.{dtype}.{op}.{pre}")
        assert_same(got, want, "allreduce " + what)
        got = hvd.grouped_allreduce([x_of(rank, n), x_of(rank, 3)], op=op, prescale_factor=pre,
                                    postscale_factor=post, name=f"gints.{dtype}.{op}.{pre}")
        assert_same(got[0], want, "grouped_allreduce " + what)
        base, extra = divmod(n, size)
        first = rank * base + min(rank, extra)
        block = want[first:first + base + (1 if rank < extra else 0)]
        got = hvd.reducescatter(x_of(rank, n), op=op, prescale_factor=pre, postscale_factor=post,
                                name=f"rsints.{dtype}.{op}.{pre}")
        assert_same(got, block, "reducescatter " + what)
        got = hvd.grouped_reducescatter([x_of(rank, n)], op=op, prescale_factor=pre,
                                        postscale_factor=post, name=f"grsints.{dtype}.{op}.{pre}")
        assert_same(got[0], block, "grouped_reducescatter " + what)
    with pytest.raises(ValueError, match="bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, prescale_factor=2.0)


def test_barrier_poll_synchronize(rank, size):
    for _ in range(3):
        hvd.barrier()
    h = hvd.allreduce_async(torch.ones(3), name="poll.me")
    while not hvd.poll(h):
        pass
    assert isinstance(hvd.poll(h), bool)
    assert torch.equal(hvd.synchronize(h), torch.ones(3))
    assert hvd.synchronize(h) is None, "a synchronized handle is unknown afterwards (Horovod)"
    with pytest.raises(ValueError):
        hvd.poll(h)


def test_join_uneven(rank, size):
    # rank r runs r + 1 steps of a summed and an averaged all-reduce, then joins. As in Horovod,
    # a joined rank contributes 0 and the average still divides by the full size; join returns
    # the last rank to join, on every rank.
    for step in range(rank + 1):
        got = hvd.allreduce(torch.full((4,), float(rank + 1)), op=hvd.Sum, name=f"join.{step}")
        total = float(sum(r + 1 for r in range(size) if r + 1 > step))
        assert torch.equal(got, torch.full((4,), total)), f"step {step}: {got} != {total}"
        got = hvd.allreduce(torch.full((4,), float(rank + 1), dtype=torch.float64),
                            op=hvd.Average, name=f"join.avg.{step}")
        assert torch.equal(got, torch.full((4,), total * (1.0 / size), dtype=torch.float64)), \
            f"step {step}: average {got}, expected {total} / {size}"
    assert hvd.join() == size - 1
    # once more, the last to join now rank 0: the others wait for it
    if rank == 0:
        hvd.allreduce(torch.ones(1), name="join.late")
    assert hvd.join() == 0


def test_join_each_rank_first_refuses_other_collectives(rank, size):
    """Each rank in turn joins first (Horovod's test_horovod_join_allgather and _broadcast, at
    every np): the others' allgather, broadcast, alltoall, reducescatter and barrier each raise
    HorovodInternalError naming the joined rank, on every rank that called them; then they join
    and everyone goes on. The ops are unnamed: the joined rank numbered none of them, yet the
    unnamed allgather after the joins must have the same name on every rank."""
    if size == 1:
        pytest.skip("join needs another rank to wait for")
    for first in range(size):
        if rank == first:
            assert hvd.join() in range(size)
            continue
        x = torch.arange(4.0 * size)
        calls = [("allgather", lambda: hvd.allgather(x)),
                 ("broadcast", lambda: hvd.broadcast(x, root_rank=(first + 1) % size)),
                 ("broadcast from the joined rank", lambda: hvd.broadcast(x, root_rank=first)),
                 ("alltoall", lambda: hvd.alltoall(x)),
                 ("reducescatter", lambda: hvd.reducescatter(x, op=hvd.Sum)),
                 ("barrier", hvd.barrier)]
        for what, call in calls:
            with pytest.raises(hvd.HorovodInternalError,
                               match=f"ranks {first} have called hvd_join") as e:
                call()
            assert isinstance(e.value, RuntimeError), what  # Horovod's tests catch RuntimeError
        hvd.join()
    got = hvd.allgather(torch.full((1,), float(rank)))
    assert torch.equal(got, torch.arange(float(size)))
    hvd.barrier()


def test_many_in_flight(rank, size):
    handles = [hvd.allreduce_async(torch.full((17,), float(i * (rank + 1))), op=hvd.Sum,
                                   name=f"flight.{i}") for i in range(64)]
    for i, h in reversed(list(enumerate(handles))):
        assert torch.equal(hvd.synchronize(h), torch.full((17,), float(i * size * (size + 1) // 2)))


def test_unnamed_from_two_threads(rank, size):
    """Two threads submit unnamed all-reduces, interleaved in opposite orders on even and odd
    ranks: each thread's tensors still meet its own on every rank (auto-names used to come
    from one counter for the whole process, so the threads' names swapped between ranks)."""
    order = ["a", "b"] if rank % 2 == 0 else ["b", "a"]
    turns = [(tag, i) for i in range(3) for tag in order]
    cond, at = threading.Condition(), [0]
    results = {"a": [], "b": []}

    def work(tag):
        scale = 1 if tag == "a" else 1000
        handles = []
        for i in range(3):
            with cond:
                cond.wait_for(lambda: turns[at[0]] == (tag, i))
                x = torch.full((4,), float(scale * (rank + 1) + i))
                handles.append(hvd.allreduce_async(x, op=hvd.Sum))
                at[0] += 1
                cond.notify_all()
        results[tag] = [hvd.synchronize(h) for h in handles]

    threads = [threading.Thread(target=work, args=(tag,), name=f"submitter-{tag}")
               for tag in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = size * (size + 1) // 2
    for tag, scale in (("a", 1), ("b", 1000)):
        for i, got in enumerate(results[tag]):
            want = torch.full((4,), float(scale * total + size * i))
            assert torch.equal(got, want), f"thread {tag} op {i}: got {got.tolist()}, expected {want.tolist()}"
