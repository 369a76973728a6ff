"""Helpers of horovod.torch built on the collectives: broadcast_parameters,
broadcast_optimizer_state, broadcast_object, allgather_object. Each is collective: every rank
(of the process set) calls it, in the same order.
Any thread.
"""
import collections.abc
import io
import itertools
import pickle

import torch

from hvdc.common import basics as B
from hvdc.common.process_sets import global_process_set
from hvdc.torch import collectives as M

_DISTRIBUTED_MODULE = "hvdc.torch.optimizer"  # DistributedOptimizer's classes are made there

try:  # Horovod pickles with cloudpickle (lambdas, local classes); plain pickle otherwise
    import cloudpickle as _pickler
except ImportError:
    _pickler = pickle


def broadcast_parameters(params, root_rank, prefix="Parameter."):
    """Copies root_rank's parameters into every rank's, in place: a model.state_dict() (or any
    mapping of name -> tensor), model.named_parameters() or model.parameters(). Typically called
    once, after creating the model and before training, so every replica starts equal."""
    if isinstance(params, collections.abc.Mapping):
        items = sorted(params.items())
    elif isinstance(params, collections.abc.Iterable) and not isinstance(params, torch.Tensor):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = []
    try:
        for i, (name, p) in enumerate(items):
            if p is None:
                continue
            if not isinstance(p, torch.Tensor):
                raise ValueError(f"broadcast_parameters: {name or i} is a {type(p).__name__}, "
                                 "not a tensor")
            label = prefix + (name if name is not None else f"unnamed.{i}")
            handles.append(M.broadcast_async_(p.data if p.requires_grad else p, root_rank, label))
    finally:
        for h in handles:
            M.synchronize(h)


_object_calls = itertools.count()


def _object_name(kind):
    # Horovod names these after type(obj), which differs between ranks in the common
    # broadcast_object(x if rank == 0 else None) and stalls; a call count is the same on every
    # rank (collectives are called in the same order everywhere anyway)
    return f"{kind}.{next(_object_calls)}"


def _pickled(obj):
    """obj's bytes as a uint8 tensor, or (None, the exception) when it cannot be pickled."""
    try:
        buf = io.BytesIO()
        _pickler.dump(obj, buf)
    except Exception as e:  # noqa: BLE001 - raised again on this rank once the others know
        return None, e
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8), None


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's obj (any picklable object) on every rank: its size, then its bytes.
    If the root cannot pickle it, every rank raises (the root its own error), none waits."""
    if name is None:
        name = _object_name("broadcast_object")
    failure = None
    if B.rank() == root_rank:
        payload, failure = _pickled(obj)
        size = torch.tensor([payload.numel() if failure is None else -1], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    M.broadcast_(size, root_rank, name + ".sz", process_set)
    if failure is not None:
        raise failure
    if size.item() < 0:
        raise ValueError(f"broadcast_object: rank {root_rank} (the root) could not pickle the object")
    if B.rank() != root_rank:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    M.broadcast_(payload, root_rank, name + ".t", process_set)
    if B.rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, in rank order (one allgather: libhvdc reports each
    rank's size with the data). A rank that cannot pickle its obj sends nothing (a pickle is
    never empty), and every rank raises, naming it."""
    if name is None:
        name = _object_name("allgather_object")
    payload, failure = _pickled(obj)
    if failure is not None:
        payload = torch.empty(0, dtype=torch.uint8)
    gathered, sizes = M.synchronize(M._allgather_async(payload, name + ".t", process_set))
    if failure is not None:
        raise failure
    failed = [r for r, n in enumerate(sizes) if n == 0]
    if failed:
        raise ValueError(f"allgather_object: rank(s) {failed} could not pickle their object")
    data, out, at = gathered.numpy().tobytes(), [], 0
    for s in sizes:
        out.append(pickle.loads(data[at:at + s]))
        at += s
    return out


def _initialize_state(optimizer):
    """Horovod's start for a fresh optimizer: every parameter that requires grad gets a zero
    gradient and the wrapped optimizer takes one step, so its state exists (momentum buffers,
    Adam moments) and every trainable parameter has a .grad; frozen parameters keep grad None
    and get no state. A DistributedOptimizer steps its inner optimizer's class, not its own
    step, which would all-reduce and wait for ranks that are not stepping."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if type(optimizer).__module__ == _DISTRIBUTED_MODULE:
        super(type(optimizer), optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, *, prefix="Parameter."):
    """Makes every rank's optimizer state root_rank's: the per-parameter state (momentum
    buffers, Adam moments, step counts, scalars included) and every param_group option (lr,
    momentum, ...). Works whether or not the other ranks' state exists yet: root's structure
    travels as one small object, then each state tensor is broadcast in place. An optimizer
    with no state yet is first started as Horovod does (_initialize_state); parameters without
    a gradient (frozen) have no state and are skipped. model (Horovod's argument): the module
    whose parameters the optimizer updates; the start's one step of zero gradients can still
    move them (weight decay: AdamW's decoupled decay, SGD's decay into its momentum), so they
    are put back as they were, buffers included. prefix (hvdc's, keyword only) names the
    broadcasts."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ValueError(f"broadcast_optimizer_state: model must be a torch.nn.Module, got "
                         f"{type(model).__name__}")
    state = optimizer.state_dict()
    if not state["state"]:
        before = None if model is None else \
            {k: v.detach().clone() for k, v in model.state_dict().items()}
        _initialize_state(optimizer)
        if before is not None:
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    v.copy_(before[k])
        state = optimizer.state_dict()
    skeleton = None
    if B.rank() == root_rank:
        skeleton = {"param_groups": state["param_groups"],
                    "state": {pid: {k: (("tensor", tuple(v.shape), str(v.dtype))
                                        if isinstance(v, torch.Tensor) else ("value", v))
                                    for k, v in s.items()}
                              for pid, s in state["state"].items()}}
    skeleton = broadcast_object(skeleton, root_rank, name=prefix + "optimizer.skeleton")
    params = [p for g in optimizer.param_groups for p in g["params"]]
    new_state, handles = {}, []
    for pid in sorted(skeleton["state"]):
        entries, mine = skeleton["state"][pid], state["state"].get(pid, {})
        new_state[pid] = {}
        for key in sorted(entries):
            kind, *spec = entries[key]
            if kind == "value":
                new_state[pid][key] = spec[0]
                continue
            shape, dtype = spec[0], getattr(torch, spec[1].replace("torch.", ""))
            t = mine.get(key)
            if not (isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.dtype == dtype):
                device = params[pid].device if pid < len(params) else "cpu"
                t = torch.empty(shape, dtype=dtype, device=device if t is None else t.device)
            new_state[pid][key] = t
            handles.append(M.broadcast_async_(t, root_rank, f"{prefix}optimizer.{pid}.{key}"))
    for h in handles:
        M.synchronize(h)
    optimizer.load_state_dict({"state": new_state, "param_groups": skeleton["param_groups"]})
