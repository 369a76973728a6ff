"""hvd.check_consistency names the replicas that differ, and the DistributedOptimizer's
periodic check (HVD_CHECK_CONSISTENCY, set to 3 for this file by tests/python/meson.build)
logs them at the right step. Run at np 3: the victim is the last rank, so the ranks that
agree form a group of two ("ranks 0-1" against "rank 2"), not just rank 0 against the rest.
Rank 0's log (stderr) is checked where the test is about what the user reads."""
import pytest
import torch

import hvdc.torch as hvd
from hvdc.torch import consistency


def model(extra=False):
    torch.manual_seed(7)  # the same replica on every rank
    layers = [torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2)]
    if extra:
        layers.insert(2, torch.nn.Tanh())
        layers.insert(3, torch.nn.Linear(3, 3))
    return torch.nn.Sequential(*layers)


def same_on_every_rank(result, what):
    """Every rank computed the same differences (names, kinds, groups, hashes)."""
    rows = hvd.allgather_object(result, name=f"same.{what}")
    for r, row in enumerate(rows):
        assert row == rows[0], f"{what}: rank {r} found {row}, rank 0 {rows[0]}"


def victim_groups():
    size = hvd.size()
    return {tuple(range(size - 1)), (size - 1,)}


def test_identical_replicas_report_nothing(capfd):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(2, 4)).sum().backward()  # the same input everywhere: the same stats
    opt.step()
    assert hvd.check_consistency(net, opt) == []
    assert capfd.readouterr().err == "", "rank 0 logged although nothing differs"


def test_nudged_parameter_is_an_error_naming_the_groups(capfd):
    net = model()
    if hvd.rank() == hvd.size() - 1:
        with torch.no_grad():
            net[0].weight[1, 2] += 1e-3
    result = hvd.check_consistency(net)
    same_on_every_rank(result, "nudged")
    assert [(d["name"], d["kind"], d["severity"]) for d in result] == \
        [("0.weight", "parameter", "error")]
    ranks = result[0]["ranks"]
    assert set(ranks) == victim_groups()
    assert len(set(ranks.values())) == 2 and all(len(h) == 16 for h in ranks.values())
    if hvd.rank() == 0:
        err = capfd.readouterr().err
        print(err)
        last = hvd.size() - 1
        assert (f"[hvdc error rank 0] check_consistency: parameter '0.weight' differs across "
                f"ranks: ranks 0-{last - 1} {ranks[tuple(range(last))]}; rank {last} "
                f"{ranks[(last,)]}") in err
        assert "hvd.broadcast_parameters(model.state_dict(), root_rank=0)" in err


def test_batchnorm_running_stats_are_a_warning_with_the_fix(capfd):
    net = model()
    net.train()
    net(torch.arange(8.0).view(2, 4) * (hvd.rank() + 1))  # each rank's own batch
    result = hvd.check_consistency(net)
    same_on_every_rank(result, "batchnorm")
    assert [(d["name"], d["kind"], d["severity"]) for d in result] == \
        [("1.running_mean", "buffer", "warning"), ("1.running_var", "buffer", "warning")]
    # every rank its own statistics; num_batches_tracked (equal) is not listed
    assert set(result[0]["ranks"]) == {(r,) for r in range(hvd.size())}
    for words in ("hvd.allreduce_", "hvd.SyncBatchNorm", "hvd.broadcast_parameters"):
        assert words in result[0]["fix"]
    if hvd.rank() == 0:
        err = capfd.readouterr().err
        print(err)
        assert "[hvdc warning rank 0] check_consistency: buffer '1.running_mean' differs" in err
        assert "2 buffers differ across" in err and "hvd.SyncBatchNorm" in err
    for name in ("running_mean", "running_var"):  # the fix the message gives: average them
        hvd.allreduce_(getattr(net[1], name), op=hvd.Average, name=f"fix.{name}")
    assert hvd.check_consistency(net) == []


def test_optimizer_state_that_differs_is_an_error():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    if hvd.rank() == hvd.size() - 1:
        opt.state[net[2].bias]["momentum_buffer"].mul_(2)
    result = hvd.check_consistency(net, opt)
    same_on_every_rank(result, "optimizer")
    assert [(d["name"], d["kind"], d["severity"]) for d in result] == \
        [("2.bias.momentum_buffer", "optimizer", "error")]
    assert set(result[0]["ranks"]) == victim_groups()
    assert "hvd.broadcast_optimizer_state" in result[0]["fix"]


def test_names_that_differ_are_a_clear_error():
    last = hvd.size() - 1
    net = model(extra=hvd.rank() == last)
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.check_consistency(net)
    message = str(e.value)
    print(message)
    assert "different lists of names" in message
    assert f"rank {last}: name #5 of 11 is '3.weight' where rank 0 has '2.weight'" in message
    assert hvd.check_consistency(model()) == []  # usable afterwards


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU tensors are "
                    "copied to the host first, which needs one")
def test_gpu_tensors_are_compared_on_the_host():
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    net = model().cuda()
    if hvd.rank() == hvd.size() - 1:
        with torch.no_grad():
            net[2].weight[0, 0] += 1
    result = hvd.check_consistency(net)
    assert [d["name"] for d in result] == ["2.weight"]


def test_periodic_check_logs_at_step_3_and_6(capfd):
    assert consistency.every() == 3, "tests/python/meson.build runs this file with " \
                                     "HVD_CHECK_CONSISTENCY=3"
    net = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=net.named_parameters())
    last = hvd.size() - 1
    for step in range(1, 8):
        opt.zero_grad()
        net(torch.ones(2, 4) * (hvd.rank() + step)).sum().backward()
        opt.step()
        if step == 4 and hvd.rank() == last:
            with torch.no_grad():
                net.weight[0, 1] += 0.5
        err = capfd.readouterr().err
        if hvd.rank() != 0:
            continue
        if step != 6:
            assert err == "", f"rank 0 logged after step {step}: {err}"
            continue
        print(err)
        assert (f"[hvdc error rank 0] DistributedOptimizer step 6 (HVD_CHECK_CONSISTENCY=3): "
                f"parameter 'weight' differs across ranks: ranks 0-{last - 1} ") in err
        assert "momentum_buffer" not in err  # averaged gradients: the state stayed equal
