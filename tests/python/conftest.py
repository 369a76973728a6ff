"""pytest set-up for the Python bindings' tests: every rank of the mpirun runs the same tests
in the same order; hvd.init() once per process, hvd.shutdown() at the end. Rank 0 reports in
full, the other ranks only their failures.
Test data is integer-valued and depends on the rank and the index, so every sum is exact in any
order and each rank can compute every rank's input, and hence the expected result, locally."""
import pytest
import torch

import hvdc.torch as hvd

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def pytest_configure(config):
    hvd.init()
    torch.set_num_threads(1)  # 2 cores, up to 4 ranks
    if hvd.rank() != 0:
        config.option.verbose = -2


_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    """A file whose every test skipped (test_cuda.py without a GPU) exits 77, which meson
    reports as skipped; the reasons are in the output (-rs)."""
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = 77


def pytest_unconfigure(config):
    hvd.shutdown()


def value(dtype, op, r, shape, salt=0):
    """Rank r's input: integers whose sum, min, max or product is exact in dtype for up to 4
    ranks (products of {1, 2}: 16), distinct per rank and index."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    h = (i * 7919 + (r + 1) * 104729 + salt * 31) % 1000003
    if dtype == torch.bool:
        v = ((h >> 3) % 2) if op != hvd.Product else ((h % 8) != 0).long()
    elif op == hvd.Product:
        v = 1 + (h % 2)
    else:
        span = {torch.uint8: 60, torch.int8: 30, torch.bfloat16: 60, torch.float16: 500}.get(dtype, 1000)
        v = h % span
        if dtype not in (torch.uint8,) and op in (hvd.Min, hvd.Max, hvd.Sum, hvd.Average):
            v = v - span // 2
    return v.to(dtype).view(shape)


def reference(dtype, op, size, shape, salt=0, prescale=1.0, postscale=1.0):
    """op over every rank's value(), computed locally: summed in float64 or int64 (exact for
    these values), scaled as libhvdc scales, then cast to dtype."""
    xs = torch.stack([value(dtype, op, r, shape, salt) for r in range(size)])
    if dtype == torch.bool:
        out = xs.any(0) if op in (hvd.Sum, hvd.Max) else xs.all(0)
        return out
    wide = xs.double() if dtype.is_floating_point else xs.long()
    wide = wide * prescale if dtype.is_floating_point else wide
    if op in (hvd.Sum, hvd.Average):
        out = wide.sum(0)
        if op == hvd.Average and not dtype.is_floating_point:
            out = torch.div(out, size, rounding_mode="trunc")
    elif op == hvd.Min:
        out = wide.min(0).values
    elif op == hvd.Max:
        out = wide.max(0).values
    else:
        out = wide.prod(0)
    if dtype.is_floating_point:
        # One factor after the sum (an average's is postscale / size), multiplied as libhvdc and
        # Horovod multiply it: in float32 for every float but float64. At 3 ranks, x * (1/3) in
        # float32 and x / 3 rounded from float64 differ in the last bit.
        factor = postscale / size if op == hvd.Average else postscale
        scale_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        out = out.to(scale_dtype) * torch.tensor(factor, dtype=torch.float64).to(scale_dtype)
    return out.to(dtype)


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()
