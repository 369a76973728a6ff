"""check_consistency: do the replicas still hold the same values? An hvdc extension (Horovod
and DDP have no such check).

Every tensor of the model (parameters, buffers) and, where given, of the optimizer's state is
hashed on every rank by libhvdc's hvd_check_consistency (host memory: GPU tensors are copied to
the host first), which also checks that the ranks hold the same names and all-gathers the
hashes; this module only gathers the tensors and says what a difference means:

  kind         severity  why it differs, and the fix in the log line
  parameter    error     written on some ranks only, or never broadcast: broadcast_parameters
  optimizer    error     state loaded or created on one rank: broadcast_optimizer_state
  buffer       warning   never averaged (BatchNorm's running statistics): allreduce_,
                         SyncBatchNorm, or broadcast_parameters(model.state_dict())

Host results are bitwise identical on every rank in libhvdc, so replicas kept in step hash
equally and any difference is real. It returns the differences and logs them on rank 0; it
raises only when it cannot compare (the ranks hold different names, a rank failed), and the
DistributedOptimizer's periodic check (HVD_CHECK_CONSISTENCY=N) logs even that and goes on: a
check never loses a run.
Main (training) thread: collective, every rank calls it at the same point.
"""
import ctypes
import sys

import torch

from hvdc.common import basics as B
from hvdc.common import library as L

PARAMETER, BUFFER, OPTIMIZER = "parameter", "buffer", "optimizer"
_LOGGED_MAX = 20  # differences rank 0 logs one line each for; then a count

_SEVERITY = {PARAMETER: "error", OPTIMIZER: "error", BUFFER: "warning"}
_FIX = {
    PARAMETER: "parameters must be equal on every rank: something changed them on some ranks "
               "only (a write outside the optimizer, a checkpoint loaded on one rank), or they "
               "were never broadcast. Broadcast rank 0's: "
               "hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
    OPTIMIZER: "the optimizer's state must be equal on every rank: it was loaded or created on "
               "some ranks only. Broadcast rank 0's: "
               "hvd.broadcast_optimizer_state(optimizer, root_rank=0)",
    BUFFER: "buffers are not averaged by the optimizer (BatchNorm's running statistics follow "
            "each rank's own batches). Average them (hvd.allreduce_(buf, op=hvd.Average) on "
            "each, e.g. before evaluating or saving), use hvd.SyncBatchNorm in place of "
            "BatchNorm, or broadcast rank 0's: "
            "hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
}


def check_consistency(model, optimizer=None):
    """Compares every parameter and buffer of model (and optimizer's state tensors, named
    "<parameter name>.<state key>", where given) across ranks. Collective.

    Returns a list with one dict per tensor that is not bitwise equal on every rank, in the
    model's order: {"name", "kind" ("parameter", "buffer" or "optimizer"), "severity"
    ("error" for parameters and optimizer state, "warning" for buffers), "ranks" ({tuple of
    ranks: value hash as 16 hex digits}, one entry per distinct value, ordered by lowest rank),
    "fix" (what to do, in words)}. [] when the replicas are equal. Rank 0 logs each difference
    to stderr. Raises HorovodInternalError when the ranks hold different tensor names (a
    different model: the message names the ranks and the first name that differs)."""
    named = dict((p, name) for name, p in model.named_parameters())
    entries = [(name, PARAMETER, p) for name, p in model.named_parameters()]
    entries += [(name, BUFFER, b) for name, b in model.named_buffers()]
    if optimizer is not None:
        entries += _state_entries(optimizer, named)
    return _compare(entries, "check_consistency")


def _state_entries(optimizer, names):
    """(name, OPTIMIZER, tensor) for every state value of every parameter optimizer holds."""
    own = getattr(optimizer, "_parameter_names", {})  # a DistributedOptimizer's names
    entries = []
    for i, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            state = optimizer.state.get(p)
            if not state:
                continue
            pname = names.get(p) or own.get(p) or f"param_groups.{i}.{j}"
            for key in sorted(state, key=str):
                value = state[key]
                if isinstance(value, (bool, int, float)):  # e.g. a step count kept as a number
                    value = torch.tensor([value], dtype=torch.float64)
                if torch.is_tensor(value):
                    entries.append((f"{pname}.{key}", OPTIMIZER, value))
    return entries


def _host(tensor):
    """The tensor's values as contiguous host memory (a copy for device or strided tensors)."""
    t = tensor.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()


def _compare(entries, who):
    """Runs hvd_check_consistency over entries [(name, kind, tensor)]; returns the differences
    (check_consistency's list) and logs them on rank 0, headed by who."""
    hosts = [_host(t) for _, _, t in entries]
    n, size = len(entries), B.size()
    buffers = (L.NamedBuffer * max(n, 1))()
    for b, (name, _, _), h in zip(buffers, entries, hosts):
        b.name, b.data, b.nbytes = name.encode(), h.data_ptr() or None, h.numel() * h.element_size()
    hashes = (ctypes.c_uint64 * max(n * size, 1))()
    n_differ = ctypes.c_int(0)
    L.check(L.lib.hvd_check_consistency(buffers, n, 0, hashes, ctypes.byref(n_differ)))
    differences = []
    for i, (name, kind, _) in enumerate(entries):
        groups = {}
        for r in range(size):
            groups.setdefault(hashes[r * n + i], []).append(r)
        if len(groups) > 1:
            differences.append({"name": name, "kind": kind, "severity": _SEVERITY[kind],
                                "ranks": {tuple(ranks): f"{h:016x}" for h, ranks in groups.items()},
                                "fix": _FIX[kind]})
    if differences and B.rank() == 0:
        _log(differences, n, size, who)
    return differences


def _ranks_text(ranks):
    """(0, 1, 3) -> "ranks 0-1,3"; (2,) -> "rank 2"."""
    spans = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    text = ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
    return ("rank " if len(ranks) == 1 else "ranks ") + text


def _say(severity, text):
    sys.stderr.write(f"[hvdc {severity} rank 0] {text}\n")


def _log(differences, n, size, who):
    for d in differences[:_LOGGED_MAX]:
        values = "; ".join(f"{_ranks_text(ranks)} {h}" for ranks, h in d["ranks"].items())
        _say(d["severity"], f"{who}: {d['kind']} '{d['name']}' differs across ranks: {values}")
    if len(differences) > _LOGGED_MAX:
        _say("warning", f"{who}: and {len(differences) - _LOGGED_MAX} more (the returned list "
                        "has them all)")
    for kind in (PARAMETER, OPTIMIZER, BUFFER):
        count = sum(d["kind"] == kind for d in differences)
        if count:
            noun = {PARAMETER: "parameter", OPTIMIZER: "optimizer state tensor",
                    BUFFER: "buffer"}[kind] + ("s differ" if count > 1 else " differs")
            _say(_SEVERITY[kind], f"{who}: {count} {noun} across {size} ranks "
                                  f"({n} tensors compared): {_FIX[kind]}")
    sys.stderr.flush()


# ---- the DistributedOptimizer's periodic check (HVD_CHECK_CONSISTENCY) ------------------------

def every():
    """HVD_CHECK_CONSISTENCY as hvd_init read it: check every this many steps; 0: never."""
    return B._topology(L.fast.hvd_check_consistency_every)


def after_step(optimizer, with_state):
    """Counts optimizer's step and, every optimizer._check_every steps, compares its
    parameters (and, with_state, its state) across ranks. Logs a check that cannot compare
    instead of raising: the run goes on."""
    optimizer._steps_done = getattr(optimizer, "_steps_done", 0) + 1
    if optimizer._steps_done % optimizer._check_every:
        return
    who = (f"DistributedOptimizer step {optimizer._steps_done} "
           f"(HVD_CHECK_CONSISTENCY={optimizer._check_every})")
    names = optimizer._parameter_names
    entries = [(name, PARAMETER, p) for p, name in sorted(names.items(), key=lambda kv: kv[1])]
    if with_state:
        entries += _state_entries(optimizer, names)
    try:
        _compare(entries, who)
    except (RuntimeError, ValueError) as e:  # HorovodInternalError is a RuntimeError
        sys.stderr.write(f"[hvdc error rank {B.rank()}] {who}: the replica check failed; "
                         f"training goes on: {e}\n")
