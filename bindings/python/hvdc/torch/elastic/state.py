"""TorchState: Horovod's elastic state of a PyTorch training process (horovod/torch/elastic/
state.py). Each keyword argument becomes an attribute; those of a known type (a Module, an
Optimizer, an LR scheduler, an ElasticSampler) are kept by a handler that saves a copy of its
state_dict, restores it and syncs it from rank 0; the rest are plain objects (ObjectState).
A commit writes the handlers' saved copies and the other attributes (hvdc.common.elastic).
One thread at a time per state.
"""
import copy

import torch

from hvdc.common import elastic as common
from hvdc.common.basics import rank
from hvdc.torch.elastic.sampler import ElasticSampler
from hvdc.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

_LRScheduler = getattr(torch.optim.lr_scheduler, "LRScheduler",
                       getattr(torch.optim.lr_scheduler, "_LRScheduler", None))


class ObjectState(common.ObjectState):
    """Horovod's ObjectState with PyTorch's broadcast: picklable attributes only (epoch, ...)."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)


class TorchState(common.ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs)."""

    _RUNTIME = common.ObjectState._RUNTIME + ("_handlers",)

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)

    def _persisted(self):
        """The live objects stay out: their handlers' saved copies go in their place."""
        values = {k: v for k, v in super()._persisted().items() if k not in self._handlers}
        values["_handler_saves"] = {name: getattr(h, "saved", None)
                                    for name, h in self._handlers.items()}
        return values

    def _load_persisted(self, values):
        values = dict(values)
        saves = values.pop("_handler_saves", {})
        super()._load_persisted(values)
        for name, saved in saves.items():
            if name in self._handlers and saved is not None:
                self._handlers[name].saved = saved


class StateHandler(object):
    """Keeps one object of the state: save() sets a copy aside, restore() puts it back,
    sync() gives every rank rank 0's. `saved` is the copy a commit writes."""

    def __init__(self, value):
        self.value = value
        self.saved = None

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict() and load_state_dict(): a deep copy is the saved state."""

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    pass


class SamplerStateHandler(_StateDictHandler):
    """An ElasticSampler's epoch and processed count; restoring it deals the rest of the epoch
    over the ranks there are now."""


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
] + ([(_LRScheduler, LRSchedulerStateHandler)] if _LRScheduler is not None else [])


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(v):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(v, handler_type):
            return handler_cls(v)
    return None


def _get_handlers(kwargs):
    handlers, remainder = {}, {}
    for k, v in kwargs.items():
        handler = _get_handler(v)
        if handler:
            handlers[k] = handler
        else:
            remainder[k] = v
    return handlers, remainder
