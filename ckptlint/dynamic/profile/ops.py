"""Per-operator costs of a checkpointed forward, and a policy applied for `--verify`
(child side, torch imported).

`OpCosts` is a `TorchDispatchMode` entered for one forward pass of a segment (the first call
with gradients of each site and module, only with `--memory-budget`): per operator overload
it adds up how often it ran, the bytes of the new storages its outputs hold (views and
in-place results hold none) and its wall time. Random operators (torch's
`nondeterministic_seeded` tag) and collectives are marked: a policy must never save them
(saving a random op's output is correct but hides nothing; a collective must run in both
passes on every rank). So is an operator whose output a later operator writes in place
(`empty_like` filled by dropout's `bernoulli_`): torch refuses a saved output that was mutated
("Tensor cached during selective activation checkpoint has been mutated").

`apply_policies` makes the verifying run checkpoint the chosen segments with the suggested
policy: it wraps the generator that torch's non-reentrant `checkpoint` calls at call time
(found by the adapter's feature test) and passes a `context_fn` built with the public
`create_selective_checkpoint_contexts` for the functions named in the policies.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ckptlint.dynamic.profile.tensors import storage_of, tensors_in

COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_dtensor")


def is_random(func) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def is_collective(func) -> bool:
    return getattr(func, "namespace", "") in COLLECTIVE_NAMESPACES


def op_name(func) -> str:
    """`aten.mm.default`: how `torch.ops` spells it (`torch.ops.aten.mm.default`)."""
    return str(func)


def written_arguments(func, args, kwargs) -> list:
    """The arguments `func`'s schema says it writes in place (`Tensor(a!) self`)."""
    try:
        schema = func._schema.arguments
    except AttributeError:
        return []
    written = []
    for position, argument in enumerate(schema):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        if argument.name in kwargs:
            written.append(kwargs[argument.name])
        elif position < len(args):
            written.append(args[position])
    return written


class OpCosts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        # name -> [count, bytes, seconds, random, collective, mutated later]
        self.ops: dict[str, list] = {}
        self.producers: dict[Any, str] = {}   # storage key -> the op whose output it is

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        known = {_key(t) for t in tensors_in((args, kwargs))}
        for t in tensors_in(written_arguments(func, args, kwargs)):
            producer = self.producers.get(_key(t))
            if producer is not None:
                self.ops[producer][5] = True
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        seconds = time.perf_counter() - t0
        name = op_name(func)
        nbytes = 0
        for t in tensors_in(out):
            storage = storage_of(t)
            if storage is None:
                continue
            key, size = storage
            if key not in known and key not in self.producers:
                self.producers[key] = name
                nbytes += size
        entry = self.ops.setdefault(name, [0, 0, 0.0, is_random(func), is_collective(func),
                                           False])
        entry[0] += 1
        entry[1] += nbytes
        entry[2] += seconds
        return out

    def table(self) -> list[list]:
        return [[name, *entry] for name, entry in self.ops.items()]


def _key(t: torch.Tensor):
    """A tensor's storage key (as `storage_of` gives it), None for an empty one."""
    storage = storage_of(t)
    return storage[0] if storage is not None else None


# --------------------------------------------------------------------------- --verify

def policy_for(names: set[str]):
    """The policy a suggestion prints: save the named operators, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx, op, *args, **kwargs):
        if op_name(op) in names:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def apply_policies(policies: dict[str, list[str]]) -> list[str]:
    """Checkpoint each function named in `policies` ("file:line:qualname" -> operator names)
    with its policy. Returns the names of the generators wrapped (none: torch has no
    non-reentrant generator this can wrap, and the verification says so)."""
    import torch.utils.checkpoint as cp
    from ckptlint.dynamic.watch.torch_adapter import _frame_builders, _parameters, targets_of

    if not hasattr(cp, "create_selective_checkpoint_contexts"):   # torch 2.4: no SAC
        return []
    wanted = {key: policy_for(set(names)) for key, names in policies.items()}
    wrapped = []
    for name, _ in _frame_builders():
        original = getattr(cp, name)
        params = _parameters(original)
        if "context_fn" not in params or "fn" not in params:
            continue
        position = params.index("context_fn")

        @functools.wraps(original)
        def with_policy(*args, _original=original, _position=position, **kwargs):
            fn = args[0] if args else kwargs.get("fn")
            policy = next((wanted[k] for k in map(_target_key, targets_of(fn)) if k in wanted),
                          None)
            if policy is not None:
                context = functools.partial(cp.create_selective_checkpoint_contexts, policy)
                if len(args) > _position:
                    args = (*args[:_position], context, *args[_position + 1:])
                else:
                    kwargs["context_fn"] = context
            return _original(*args, **kwargs)

        setattr(cp, name, with_policy)
        wrapped.append(name)
    return wrapped


def _target_key(target) -> str:
    filename, first, qualname = target
    return f"{filename}:{first}:{qualname}"


def target_key(targets: Any) -> str | None:
    return _target_key(targets[0]) if targets else None
