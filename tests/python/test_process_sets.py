"""Process sets from Python: {0, 2} and {1, 3} at np 4 (the even and the odd ranks at other
sizes) running their collectives at the same time, each checked against its members' values;
a set's all-reduce waiting for its last rank while the other set and the global set go on;
a DistributedOptimizer per set; and the errors: a non-member submitting, the same set added
twice, removing with work in flight, using a removed set."""
import pytest
import torch

import hvdc.torch as hvd
from conftest import value

pytestmark = pytest.mark.skipif("hvd.size() < 2", reason="process sets need two ranks")


@pytest.fixture
def sets():
    size = hvd.size()
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set(hvd.ProcessSet([r for r in range(size) if r % 2 == 1]))
    yield even, odd
    hvd.remove_process_set(even)
    hvd.remove_process_set(odd)


def mine(sets):
    return sets[hvd.rank() % 2]


def test_registration(sets):
    even, odd = sets
    assert even.process_set_id > 0 and odd.process_set_id > even.process_set_id
    ps = mine(sets)
    assert ps.included() and ps.rank() == hvd.rank() // 2
    assert ps.size() == len(ps.ranks)
    other = sets[1 - hvd.rank() % 2]
    assert not other.included() and other.rank() == -1
    with pytest.raises(ValueError, match="already"):
        hvd.add_process_set(even)
    with pytest.raises(ValueError, match="has these ranks already"):
        hvd.add_process_set(list(even.ranks))
    assert str(even).startswith("ProcessSet(process_set_id=")


def test_collectives_in_both_sets_at_once(sets):
    ps = mine(sets)
    members = ps.ranks
    # 10 all-reduces in flight in this rank's set and 3 global ones between them
    handles, ghandles = [], []
    for k in range(10):
        handles.append(hvd.allreduce_async(value(torch.float32, hvd.Sum, hvd.rank(), (4,), k),
                                           op=hvd.Sum, name=f"ps.ar.{k}", process_set=ps))
        if k % 4 == 0:
            ghandles.append(hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name=f"ps.global.{k}"))
    for k, h in enumerate(handles):
        want = sum(value(torch.float32, hvd.Sum, r, (4,), k) for r in members)
        assert torch.equal(hvd.synchronize(h), want), k
    for h in ghandles:
        assert torch.equal(hvd.synchronize(h), torch.full((2,), float(hvd.size())))
    # every other collective inside the set
    root = members[-1]
    assert torch.equal(hvd.broadcast(torch.full((3,), float(hvd.rank())), root, process_set=ps),
                       torch.full((3,), float(root)))
    g = hvd.allgather(torch.full((ps.rank() + 1, 2), hvd.rank()), process_set=ps)
    assert torch.equal(g, torch.cat([torch.full((i + 1, 2), r) for i, r in enumerate(members)]))
    out, received = hvd.alltoall(torch.arange(ps.size()) + 10 * hvd.rank(), splits=[1] * ps.size(),
                                 process_set=ps)
    assert out.tolist() == [10 * r + ps.rank() for r in members] and received.tolist() == [1] * ps.size()
    rows = 2 * ps.size() + 1
    full = sum(value(torch.int32, hvd.Sum, r, (rows, 3)) for r in members)
    base, extra = divmod(rows, ps.size())
    me = ps.rank()
    first, n = me * base + min(me, extra), base + (1 if me < extra else 0)
    got = hvd.reducescatter(value(torch.int32, hvd.Sum, hvd.rank(), (rows, 3)), op=hvd.Sum, process_set=ps)
    assert torch.equal(got, full[first:first + n])
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum, process_set=ps).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), float((hvd.rank() + 1) * len(members))))
    hvd.barrier(process_set=ps)
    assert hvd.allgather_object(hvd.rank(), process_set=ps) == members
    assert hvd.broadcast_object(hvd.rank(), root_rank=members[0], process_set=ps) == members[0]


def test_sets_do_not_wait_for_each_other(sets):
    even, odd = sets
    last_odd = odd.ranks[-1]
    x = torch.ones(1)
    late = None
    if hvd.rank() % 2 == 1 and hvd.rank() != last_odd:
        late = hvd.allreduce_async(x, op=hvd.Sum, name="late", process_set=odd)
    if hvd.rank() % 2 == 0:
        for k in range(30):
            hvd.allreduce(torch.ones(1), name=f"even.{k}", process_set=even)
    hvd.barrier()  # the even ranks get here only if their set ran meanwhile
    if late is not None:
        assert not hvd.poll(late), "the odd all-reduce finished before its last rank submitted it"
    hvd.barrier()  # the last odd rank submits only once the others have looked
    if hvd.rank() == last_odd:
        late = hvd.allreduce_async(x, op=hvd.Sum, name="late", process_set=odd)
    if late is not None:
        assert hvd.synchronize(late).item() == odd.size()


def test_distributed_optimizer_per_set(sets):
    ps = mine(sets)
    torch.manual_seed(ps.process_set_id)  # the same start within a set
    model = torch.nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=ps)
    for step in range(3):
        opt.zero_grad()
        x = torch.full((2, 3), float(hvd.rank() + step))
        model(x).sum().backward()
        opt.step()
    rows = hvd.allgather(torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], 1),
                         process_set=ps)
    assert all(torch.equal(rows[i], rows[0]) for i in range(rows.shape[0]))


def test_errors(sets):
    even, odd = sets
    other = sets[1 - hvd.rank() % 2]
    with pytest.raises(ValueError, match="is not in process set"):
        hvd.allreduce(torch.ones(2), process_set=other)
    # every rank's set is the global one: a duplicate, refused on every rank as Horovod does
    with pytest.raises(ValueError, match="duplicate process set"):
        hvd.add_process_set(list(range(hvd.size())))
    if hvd.size() < 3:
        return  # the rest needs a set of two ranks that is not the global set
    # removing with work in flight is refused on every rank; afterwards it works
    extra = hvd.add_process_set([0, 1])
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="pending", process_set=extra) if hvd.rank() == 0 else None
    with pytest.raises(ValueError, match="in flight on rank"):
        hvd.remove_process_set(extra)
    if hvd.rank() == 1:
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="pending", process_set=extra)
    if h is not None:
        assert hvd.synchronize(h).item() == 2.0
    assert hvd.remove_process_set(extra) is True
    assert hvd.remove_process_set(extra) is False  # not registered any more
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=extra)
    with pytest.raises(ValueError, match="global"):
        hvd.remove_process_set(hvd.global_process_set)
    # ranks that disagree on a new set: every rank fails, nothing is added
    with pytest.raises(hvd.HorovodInternalError, match="other ranks"):
        hvd.add_process_set([0] if hvd.rank() == 0 else [0, 1])
