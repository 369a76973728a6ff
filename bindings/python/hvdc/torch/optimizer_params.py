"""What both DistributedOptimizers (optimizer.py, optimizer_adasum.py) share: the class they
return, naming their parameters as Horovod checks them, and counting backward passes before a
gradient goes out. A module of its own, below both, so neither imports the other for it.
Main (training) thread; count_backward_pass on autograd's thread (hooks).
"""


def wrapped_class(cls, base):
    """The class DistributedOptimizer returns for an optimizer of class base: base with cls's
    methods copied in, as Horovod makes it, so super(type(opt), opt) is base (hvd's
    broadcast_optimizer_state steps the wrapped optimizer that way). The methods reach base
    through _hvdc_wrapper, the class made here, which a user's subclass inherits:
    super(self.__class__, self) would recurse forever in such a subclass."""
    made = type(base.__name__, (base,), dict(cls.__dict__))
    made._hvdc_wrapper = made
    return made


def find_duplicates(lst):
    """The elements that occur more than once in lst."""
    seen, dups = set(), set()
    for el in lst:
        if el in seen:
            dups.add(el)
        seen.add(el)
    return dups


def count_backward_pass(opt, p):
    """A backward pass produced p's gradient (its hook): counts it against
    backward_passes_per_step, as Horovod does. True when this pass is the last before step(),
    the one whose gradient goes out. (Three dictionary lookups: a tensor's hash is a Python
    call, and this runs for every gradient of every step.)"""
    delay = opt._allreduce_delay[p]
    entry = opt._handles.get(p)
    if entry is not None and entry[0] is not None and delay <= 0:
        raise AssertionError(
            "Gradients were computed more than backward_passes_per_step times "
            "before call to step(). Increase backward_passes_per_step to "
            "accumulate gradients locally.")
    assert not p.grad.requires_grad
    assert delay > 0
    delay -= 1
    opt._allreduce_delay[p] = delay
    return delay == 0


def named_parameters_of(param_groups, named_parameters):
    """named_parameters as a list of (name, parameter), checked as Horovod checks it: tuples,
    unique names, every parameter of param_groups named; without it, names by position."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [(f"allreduce.noname.{i}.{j}", v)
                            for i, param_group in enumerate(param_groups)
                            for j, v in enumerate(param_group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    dups = find_duplicates([k for k, _ in named_parameters])
    if len(dups) > 0:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         "Found duplicates: %s" % ", ".join(dups))
    all_param_ids = {id(v) for param_group in param_groups for v in param_group["params"]}
    named_param_ids = {id(v) for k, v in named_parameters}
    unnamed_param_ids = all_param_ids - named_param_ids
    if len(unnamed_param_ids):
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: "
                         "%s" % ", ".join(str(id) for id in unnamed_param_ids))
    return named_parameters
