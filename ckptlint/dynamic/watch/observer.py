"""The observer API: what the interception reports, for dynamic mode and for `profile`.

This module imports nothing from torch. The torch adapter (`torch_adapter.py`, loaded only
inside the watched child process) calls every registered observer at these points of each
checkpoint call:

    call_started(call)                      a checkpoint call began (before its forward)
    pass_started(call, phase) -> ctx|None   a pass of the checkpointed function starts;
                                            phase is "forward", "replay" or "replay_now".
                                            A returned context manager is entered now and
                                            exited when the pass ends (e.g. a dispatch mode).
    tensor_saved(call, phase, index, tensor)  autograd packed a tensor for backward
                                            (non-reentrant forward and replay, replay_now)
    pass_ended(call, phase, info)           the pass ended; info is a PassEnd
    not_watched(site, reason, lines)        a call could not be watched (it ran compiled by
                                            torch.compile); lines: the source lines
                                            [(file, row)] its compiled graph was traced from
    compile_used(site)                      torch.compile was called here (what it compiles
                                            may or may not hold checkpoint calls)

Observers are registered in the child with `add_observer`, or named by the parent:
`runner.run_watched(command, observers=["pkg.module:factory"], record=False)` sets
CKPTLINT_DYNAMIC_OBSERVERS, and the child calls each factory() and registers what it returns
(the factory may read its own settings from the environment and write its own output file).

Observers must not change what the program computes: no RNG draws, no in-place changes, no
extra calls of the user's function. They run with the observer lock-free on the calling thread
(autograd may run the replay on a device thread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

# (filename, row, column), 1-based; filename is absolute (realpath).
Site = tuple[str, int, int]
# (filename, first line of the code object, qualname)
Target = tuple[str, int, str]


@dataclass
class CheckpointCall:
    """One call of a checkpoint API, as seen by the adapter."""

    id: int
    mode: str                      # "non-reentrant" | "reentrant"
    site: Site | None
    targets: tuple[Target, ...]
    fn: Any = None                 # the checkpointed callable (not serialised)
    preserve_rng_state: bool = True
    grad_enabled: bool = True
    inputs_require_grad: bool = True
    # The positional arguments, from call_started until the forward ends (then dropped unless
    # an observer set scratch["keep_args"] = True, e.g. to rerun the segment for a grad check).
    args: tuple = ()
    # data_ptr of the untyped storage of each tensor argument (to tell inputs from activations).
    input_storages: frozenset = frozenset()
    # Anything an observer wants to keep per call (e.g. timings for profile).
    scratch: dict[str, Any] = field(default_factory=dict)
    # Set by the adapter: how many passes of each phase ran.
    passes: dict[str, int] = field(default_factory=dict)


@dataclass
class PassEnd:
    """How a pass ended."""

    error: Optional[BaseException] = None   # exception raised by the pass (not early stop)
    early_stopped: bool = False               # non-reentrant replay stopped after last save
    seconds: float = 0.0                      # wall time of the pass (perf_counter)


class Observer:
    """Base class with no-op hooks; subclass and register with `add_observer`."""

    def call_started(self, call: CheckpointCall) -> None:
        pass

    def pass_started(self, call: CheckpointCall, phase: str):  # -> ContextManager | None
        return None

    def tensor_saved(self, call: CheckpointCall, phase: str, index: int, tensor: Any) -> None:
        pass

    def pass_ended(self, call: CheckpointCall, phase: str, info: PassEnd) -> None:
        pass

    def not_watched(self, site: Site | None, reason: str,
                    lines: Sequence[tuple[str, int]] = ()) -> None:
        pass

    def compile_used(self, site: Site | None) -> None:
        pass


_OBSERVERS: list[Observer] = []


def add_observer(observer: Observer) -> None:
    if observer not in _OBSERVERS:
        _OBSERVERS.append(observer)


def remove_observer(observer: Observer) -> None:
    if observer in _OBSERVERS:
        _OBSERVERS.remove(observer)


def observers() -> list[Observer]:
    return list(_OBSERVERS)
