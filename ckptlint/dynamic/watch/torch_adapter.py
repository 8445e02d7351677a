"""The one place that knows torch's checkpoint internals (loaded only in the watched child).

It hooks the names that torch looks up *at call time*, never the public `checkpoint`
function (which callers may have bound earlier with `from ... import checkpoint`). One
function per internal, each with its feature test (`_needs_*`, which says what is missing):

  non-reentrant  `_CheckpointFrame`        a call begins (the function, its inputs)
                 `_checkpoint_hook`         the forward pass and the tensors it saves
                 `_recomputation_hook`      the replay pass, its saved tensors, early stop
                 the generator that builds `_CheckpointFrame`
                     (`_checkpoint_without_reentrant_generator`, since torch 2.14 its
                     `_impl`): forwards under no_grad, for --replay-now; optional
  reentrant      `CheckpointFunction`       forward and replay through `run_function`

`checkpoint`, `checkpoint_sequential`, `checkpoint_wrapper`/`apply_activation_checkpointing`,
`torch.distributed._composable.checkpoint` and transformers layers all funnel into these.
Where torch offers a public extension point that carries what is needed, it is used instead:
saved tensors are counted by the hooks' own pack functions (not torch's holder lists),
`--replay-now` reruns from the inputs the call received under a plain
`torch.autograd.graph.saved_tensors_hooks`, and ops are recorded by a `TorchDispatchMode`.
What is present is found by feature tests, never by version numbers: a missing internal is
reported with the reason, and the calls that would need it get `error` verdicts.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import os
import random
import re
import sys
import sysconfig
import threading
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.utils.checkpoint as _cp

from ckptlint.dynamic.watch.observer import CheckpointCall, PassEnd, observers

_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
# ckptlint's own package: its frames (watcher, profiler) are never the user's call site.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))) + os.sep
_STDLIB_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")}
    if p
)
_LIB_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)

_state = threading.local()
# Call ids count per process; a forked child goes on from its parent's count, which is fine:
# observers key calls by (pid, id).
_ids = iter(range(1, 1 << 62))
_lock = threading.Lock()


def _new_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()   # another thread may have held the parent's at the fork


os.register_at_fork(after_in_child=_new_lock_after_fork)
REPLAY_NOW = False
FEATURES: dict[str, Any] = {}
ERRORS: dict[str, str] = {}   # mode -> reason it cannot be watched
_installed = False


# --------------------------------------------------------------------------- locations

_realpath_cache: dict[str, str] = {}


def realpath(filename: str) -> str:
    cached = _realpath_cache.get(filename)
    if cached is None:
        cached = _realpath_cache[filename] = os.path.realpath(filename)
    return cached


def is_library_file(filename: str) -> bool:
    path = realpath(filename)
    return (path.startswith(_TORCH_DIR) or path.startswith(_OWN_DIR)
            or path.startswith(_STDLIB_DIRS) or any(m in path for m in _LIB_MARKERS)
            or filename.startswith("<"))


def _call_site(start: types.FrameType | None) -> tuple[str, int, int] | None:
    """The innermost frame outside torch, site-packages, the stdlib and ckptlint."""
    frame = start
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_library_file(filename):
            return _frame_position(frame)
        if fallback is None and not realpath(filename).startswith((_TORCH_DIR, _OWN_DIR)) \
                and not filename.startswith("<") and not realpath(filename).startswith(_STDLIB_DIRS):
            fallback = _frame_position(frame)
        frame = frame.f_back
    return fallback


def _frame_position(frame: types.FrameType) -> tuple[str, int, int]:
    row, column = frame.f_lineno, 1
    try:
        positions = list(frame.f_code.co_positions())
        pos = positions[frame.f_lasti // 2]
        if pos[0] is not None:
            row = pos[0]
        if pos[2] is not None:
            column = pos[2] + 1
    except (AttributeError, IndexError, ValueError):
        pass
    return (realpath(frame.f_code.co_filename), row, column)


# --------------------------------------------------------------------------- targets

def _code_target(code: types.CodeType) -> tuple[str, int, str]:
    return (realpath(code.co_filename), code.co_firstlineno,
            getattr(code, "co_qualname", code.co_name))


def _in_torch(code: types.CodeType) -> bool:
    return realpath(code.co_filename).startswith(_TORCH_DIR)


def targets_of(fn: Any, depth: int = 0) -> list[tuple[str, int, str]]:
    """The user functions a checkpointed callable runs (code file, first line, qualname)."""
    if fn is None or depth > 6:
        return []
    if isinstance(fn, functools.partial):
        return targets_of(fn.func, depth + 1)
    if isinstance(fn, torch.nn.Module):
        forward = _unwrapped(getattr(type(fn), "forward", None))
        code = getattr(forward, "__code__", None)
        if code is not None and not _in_torch(code):
            return [_code_target(code)]
        inner = getattr(fn, "_checkpoint_wrapped_module", None)
        if inner is not None:
            return targets_of(inner, depth + 1)
        if isinstance(fn, (torch.nn.Sequential, torch.nn.ModuleList)):
            out: list = []
            for child in fn.children():
                out.extend(targets_of(child, depth + 1))
            return out
        return [_code_target(code)] if code is not None else []
    if isinstance(fn, types.MethodType):
        owner = fn.__self__
        code = getattr(fn.__func__, "__code__", None)
        if code is not None and _in_torch(code) and isinstance(owner, torch.nn.Module):
            return targets_of(owner, depth + 1)      # e.g. super().__call__ of a layer
        return [_code_target(code)] if code is not None else targets_of(fn.__func__, depth + 1)
    code = getattr(_unwrapped(fn), "__code__", None)
    if code is not None:
        if not _in_torch(code):
            return [_code_target(code)]
        # A closure made inside torch (checkpoint_sequential's run_function, the
        # checkpoint_wrapper kwargs packer): look at what it closes over.
        cells = _closure_values(fn)
        if {"functions", "start", "end"} <= cells.keys():
            funcs = cells["functions"]
            chosen = list(funcs)[cells["start"]:cells["end"] + 1]
            out = []
            for item in chosen:
                out.extend(targets_of(item, depth + 1))
            return out
        out = []
        for value in cells.values():
            if isinstance(value, torch.nn.Module) or callable(value):
                inner = getattr(value, "_checkpoint_wrapped_module", None)
                out.extend(targets_of(inner if inner is not None else value, depth + 1))
        return out or [_code_target(code)]
    call = getattr(type(fn), "__call__", None)
    if call is not None and hasattr(call, "__code__"):
        return [_code_target(call.__code__)]
    return []


def _unwrapped(function):
    """The function a decorator wrapped (`functools.wraps` sets `__wrapped__`): a layer's
    forward decorated by a library (transformers' `deprecate_kwarg`) is the user's code."""
    try:
        return inspect.unwrap(function) if function is not None else None
    except ValueError:
        return function


def _closure_values(fn) -> dict[str, Any]:
    """The values a function closes over, by name (cells not yet filled are left out)."""
    values = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:
            pass
    return values


def module_of(fn: Any):
    """The module a checkpointed callable runs: the module itself, a bound method's owner, or
    the module a partial binds as the first argument of a function (transformers checkpoints
    `partial(forward, layer, **kwargs)`)."""
    while isinstance(fn, functools.partial):
        if fn.args and isinstance(fn.args[0], torch.nn.Module) \
                and not isinstance(fn.func, (torch.nn.Module, functools.partial)) \
                and getattr(fn.func, "__self__", None) is None:
            return fn.args[0]
        fn = fn.func
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


# --------------------------------------------------------------------------- calls and passes

def _is_compiling() -> bool:
    try:
        return bool(torch.compiler.is_compiling())
    except Exception:
        return False


def _notify(method: str, *args):
    for obs in observers():
        try:
            getattr(obs, method)(*args)
        except Exception as exc:  # an observer must never break the program
            _report_observer_failure(obs, method, exc)


def _report_observer_failure(obs, method, exc):
    key = (type(obs).__name__, method)
    seen = getattr(_report_observer_failure, "seen", set())
    _report_observer_failure.seen = seen
    if key not in seen:
        seen.add(key)
        print(f"ckptlint: observer {key[0]}.{method} failed: {exc!r}", file=sys.stderr)


def new_call(mode: str, fn, args, preserve: bool, grad: bool, caller: types.FrameType | None,
             kwargs: dict | None = None):
    graph = _graph_module(fn)
    if _is_compiling():
        _note_compiled(caller, "traced by torch.compile", graph)
        return None
    if graph is not None:
        _note_compiled(caller, COMPILED_REASON, graph)
        return None
    with _lock:
        call_id = next(_ids)
    try:
        targets = tuple(targets_of(fn))
    except Exception:
        targets = ()
    call = CheckpointCall(
        id=call_id, mode=mode, site=_call_site(caller), targets=targets, fn=fn,
        preserve_rng_state=bool(preserve), grad_enabled=grad,
        inputs_require_grad=any(isinstance(a, torch.Tensor) and a.requires_grad for a in args),
        args=tuple(args), input_storages=frozenset(_storages(args)),
    )
    # The call's arguments, for observers' `call_started` only (e.g. profile's input storages
    # and --grad-check); removed right after so that no observer keeps them alive by accident.
    call.scratch["args"] = args
    call.scratch["kwargs"] = dict(kwargs or {})
    try:
        _notify("call_started", call)
    finally:
        call.scratch.pop("args", None)
        call.scratch.pop("kwargs", None)
    return call


COMPILED_REASON = ("checkpoint traced by torch.compile: it runs as a compiled higher-order op, "
                   "so its forward and replay are not the user's eager code")


def _note_compiled(caller: types.FrameType | None, reason: str, graph) -> None:
    _state.compiled_noted = getattr(_state, "compiled_noted", 0) + 1
    _notify("not_watched", _call_site(caller), reason, _graph_lines(graph))


def _graph_module(fn):
    """The fx GraphModule a compiled checkpoint runs (torch.compile's higher-order op passes
    the graph itself, a bound method of it or of an fx Interpreter running it, or a closure
    over it), else None."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    graph_module = getattr(getattr(torch, "fx", None), "GraphModule", None)
    if graph_module is None:
        return None
    owner = getattr(fn, "__self__", fn)
    if isinstance(owner, graph_module):
        return owner
    if isinstance(getattr(owner, "module", None), graph_module):   # `Interpreter(graph).run`
        return owner.module
    cells = _closure_values(fn) if getattr(fn, "__code__", None) is not None else {}
    return next((c for c in cells.values() if isinstance(c, graph_module)), None)


def _graph_lines(graph) -> list[tuple[str, int]]:
    """The source lines (outside torch) a compiled graph was traced from: each node's
    `stack_trace` names the user's frames, from the compiled function down to the op."""
    lines: set[tuple[str, int]] = set()
    for node in getattr(getattr(graph, "graph", None), "nodes", ()):
        trace = node.meta.get("stack_trace") if isinstance(node.meta, dict) else None
        for filename, row in re.findall(r'File "([^"]+)", line (\d+)', trace or ""):
            if not is_library_file(filename):
                lines.add((realpath(filename), int(row)))
    return sorted(lines)


def _storages(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            try:
                yield a.untyped_storage().data_ptr()
            except Exception:
                pass


class PassScope:
    """Brackets one pass: tells observers, enters the contexts they return."""

    def __init__(self, call: CheckpointCall, phase: str):
        self.call, self.phase = call, phase
        self.contexts: list = []
        self.t0 = 0.0
        self.open = False

    def start(self):
        self.call.passes[self.phase] = self.call.passes.get(self.phase, 0) + 1
        for obs in observers():
            try:
                ctx = obs.pass_started(self.call, self.phase)
                if ctx is not None:
                    ctx.__enter__()
                    self.contexts.append(ctx)
            except Exception as exc:
                _report_observer_failure(obs, "pass_started", exc)
        self.open = True
        self.t0 = time.perf_counter()
        return self

    def end(self, error: BaseException | None = None, early_stopped: bool = False):
        if not self.open:
            return
        self.open = False
        seconds = time.perf_counter() - self.t0
        for ctx in reversed(self.contexts):
            try:
                ctx.__exit__(None, None, None)
            except Exception as exc:
                _report_observer_failure(ctx, "__exit__", exc)
        _notify("pass_ended", self.call, self.phase,
                PassEnd(error=error, early_stopped=early_stopped, seconds=seconds))
        if self.phase == "forward" and not self.call.scratch.get("keep_args"):
            self.call.args = ()


def _saved(call, phase, index, tensor):
    for obs in observers():
        try:
            obs.tensor_saved(call, phase, index, tensor)
        except Exception as exc:
            _report_observer_failure(obs, "tensor_saved", exc)


class _rng_fork_for:
    """Restores every random stream the rerun may draw from (--replay-now only): torch CPU,
    the devices of `args` and every initialised CUDA device, Python `random`, NumPy's global
    generator. The rerun itself draws from the state as it is, like the real replay would."""

    def __init__(self, args):
        try:
            devices, _ = _cp.get_device_states(*args)
            device_type = _cp._infer_device_type(*args)
        except Exception:
            devices, device_type = [], "cuda"
        try:
            if torch.cuda.is_initialized():
                devices = sorted(set(devices) | set(range(torch.cuda.device_count())))
                device_type = "cuda"
        except Exception:
            pass
        self.fork = torch.random.fork_rng(devices=devices, device_type=device_type)

    def __enter__(self):
        self.py_state = random.getstate()
        numpy = sys.modules.get("numpy")
        self.np_state = numpy.random.get_state() if numpy is not None else None
        self.fork.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            return self.fork.__exit__(*exc)
        finally:
            random.setstate(self.py_state)
            numpy = sys.modules.get("numpy")
            if numpy is not None and self.np_state is not None:
                numpy.random.set_state(self.np_state)


def _watching_pack(pack: Callable, call: CheckpointCall, phase: str) -> Callable:
    """torch's pack hook of one pass, showing each saved tensor to the observers first,
    numbered in pack order. Torch's own markers on its hook (such as `_checkpoint_internal`,
    which tells torch's hooks from the user's since 2.14) are carried over."""
    index = itertools.count()

    def watched(x):
        _saved(call, phase, next(index), x)
        return pack(x)

    watched.__dict__.update({k: v for k, v in getattr(pack, "__dict__", {}).items()
                             if not k.startswith("__")})
    return watched


def _keep_for_replay_now(call: CheckpointCall, fn, args, kwargs) -> None:
    """What --replay-now reruns: the checkpointed function, its inputs, and (when the call
    preserves RNG state) the random state its forward starts from."""
    rng = _capture_rng(args) if call.preserve_rng_state else None
    call.scratch["replay_now"] = (fn, tuple(args), dict(kwargs or {}), rng)


def _replay_now(call: CheckpointCall, grad: bool) -> None:
    """--replay-now: run the checkpointed function again right after its forward, from the
    inputs and random state it started from, as a "replay_now" pass (with gradients on, its
    saved tensors too, seen through a plain saved_tensors_hooks). Every random stream is
    forked around it, so the program draws the numbers it would have drawn."""
    kept = call.scratch.pop("replay_now", None)
    if kept is None:
        return
    fn, args, kwargs, rng = kept
    index = itertools.count()

    def pack(x):
        _saved(call, "replay_now", next(index), x)
        return x

    try:
        saves = (torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x) if grad
                 else contextlib.nullcontext())
        scope = PassScope(call, "replay_now")
        error = None
        with _rng_fork_for(args):
            if rng is not None:
                _restore_rng(rng)
            with saves:
                scope.start()
                try:
                    with torch.enable_grad() if grad else torch.no_grad():
                        fn(*args, **kwargs)
                except Exception as exc:
                    error = exc
                finally:
                    scope.end(error)
    except Exception as exc:
        _report_observer_failure(call, "replay_now", exc)


def _capture_rng(args):
    cpu = torch.get_rng_state()
    try:
        devices, states = _cp.get_device_states(*args)
        device_type = _cp._infer_device_type(*args)
    except Exception:
        devices, states, device_type = [], [], None
    return cpu, devices, states, device_type


def _restore_rng(rng):
    cpu, devices, states, device_type = rng
    torch.set_rng_state(cpu)
    if devices:
        if "device_type" in _parameters(_cp.set_device_states):
            _cp.set_device_states(devices, states, device_type=device_type)
        else:   # torch 2.4 infers the device type from the states
            _cp.set_device_states(devices, states)


# --------------------------------------------------------------------------- feature tests
#
# Each `_needs_*` function returns None when this torch provides an internal the way its hook
# uses it, else what is missing (a phrase completing "torch X lacks ..."). They read torch's
# code objects (which names a function looks up when it runs), never version numbers.

def _nested_names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and the functions nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _nested_names(const)
    return names


def _checkpoint_module_function(name: str):
    """The function of torch.utils.checkpoint bound to `name` (decorators unwrapped), else None."""
    value = getattr(_cp, name, None)
    if value is None or not callable(value):
        return None
    try:
        value = inspect.unwrap(value)
    except ValueError:
        return None
    if getattr(value, "__module__", None) != _cp.__name__ or not hasattr(value, "__code__"):
        return None
    return value


def _names_run_by(entry, depth: int = 4) -> set[str]:
    """Every name that `entry` looks up when it runs, following its calls into other functions
    of torch.utils.checkpoint (since torch 2.14 `checkpoint` hands its work to
    `_checkpoint_impl`, which is where `CheckpointFunction` is looked up)."""
    names: set[str] = set()
    seen: set[types.CodeType] = set()
    todo = [(entry, 0)]
    while todo:
        function, level = todo.pop()
        if function.__code__ in seen:
            continue
        seen.add(function.__code__)
        found = _nested_names(function.__code__)
        names |= found
        if level < depth:
            todo.extend((callee, level + 1) for callee in map(_checkpoint_module_function, found)
                        if callee is not None)
    return names


def _names_run_by_checkpoint() -> set[str]:
    entry = _checkpoint_module_function("checkpoint")
    return _names_run_by(entry) if entry is not None else set()


def _frame_builders() -> list[tuple[str, Any]]:
    """(name, function) of each generator in torch.utils.checkpoint that builds a
    `_CheckpointFrame`: the non-reentrant forward."""
    found = []
    for name in sorted(vars(_cp)):
        function = _checkpoint_module_function(name)
        if function is not None and function.__code__.co_flags & inspect.CO_GENERATOR \
                and "_CheckpointFrame" in _nested_names(function.__code__):
            found.append((name, function))
    return found


def _parameters(function) -> list[str]:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


def _is_saved_tensors_hooks(cls) -> bool:
    """A subclass of torch.autograd.graph.saved_tensors_hooks, whose `__enter__` installs the
    instance's `pack_hook` (so a hook that replaces it sees every saved tensor)."""
    base = getattr(torch.autograd.graph, "saved_tensors_hooks", None)
    return (isinstance(base, type) and isinstance(cls, type) and issubclass(cls, base)
            and "pack_hook" in _nested_names(base.__enter__.__code__))


def _needs_frame() -> str | None:
    if not isinstance(getattr(_cp, "_CheckpointFrame", None), type):
        return "`_CheckpointFrame`"
    builders = _frame_builders()
    if not builders:
        return "call-time lookup of `_CheckpointFrame` in a generator"
    if "_CheckpointFrame" not in _names_run_by_checkpoint():
        return "a `checkpoint` that builds `_CheckpointFrame`"
    for name, function in builders:
        if not {"fn", "args", "preserve_rng_state"} <= set(function.__code__.co_varnames):
            return f"the locals `fn`, `args` and `preserve_rng_state` of `{name}`"
    return None


def _needs_forward_hook() -> str | None:
    hook = getattr(_cp, "_checkpoint_hook", None)
    if not _is_saved_tensors_hooks(hook):
        return "a `_checkpoint_hook` built on `saved_tensors_hooks`"
    if _parameters(hook.__init__)[:2] != ["self", "frame"]:
        return "`_checkpoint_hook(frame)`"
    builders = _frame_builders()
    if not builders or not all("_checkpoint_hook" in _nested_names(function.__code__)
                               for _, function in builders):
        return "call-time lookup of `_checkpoint_hook` where `_CheckpointFrame` is built"
    return None


def _needs_replay_hook() -> str | None:
    hook = getattr(_cp, "_recomputation_hook", None)
    if not _is_saved_tensors_hooks(hook):
        return "a `_recomputation_hook` built on `saved_tensors_hooks`"
    if _parameters(hook.__init__)[:3] != ["self", "target_frame_ref", "gid"]:
        return "`_recomputation_hook(target_frame_ref, gid)`"
    forward = getattr(_cp, "_checkpoint_hook", None)
    if not isinstance(forward, type) or \
            "_recomputation_hook" not in _nested_names(forward.__init__.__code__):
        return "call-time lookup of `_recomputation_hook` in `_checkpoint_hook`"
    if not isinstance(getattr(_cp, "_StopRecomputationError", None), type):
        return "`_StopRecomputationError` (how a replay that stops early ends)"
    return None


def _needs_no_grad_forwards() -> str | None:
    builders = _frame_builders()
    if not builders:
        return "a generator that builds `_CheckpointFrame`"
    if not {name for name, _ in builders} & _names_run_by_checkpoint():
        return "call-time lookup of the generator that builds `_CheckpointFrame` in `checkpoint`"
    return None


def _needs_checkpoint_function() -> str | None:
    cf = getattr(_cp, "CheckpointFunction", None)
    if not (isinstance(cf, type) and issubclass(cf, torch.autograd.Function)):
        return "a `CheckpointFunction` (torch.autograd.Function)"
    if _parameters(cf.forward)[:3] != ["ctx", "run_function", "preserve_rng_state"]:
        return "a CheckpointFunction(ctx, run_function, preserve_rng_state, *args)"
    if "CheckpointFunction" not in _names_run_by_checkpoint():
        return "call-time lookup of `CheckpointFunction` in `checkpoint`"
    return None


def _needs_dispatch_mode() -> str | None:
    try:
        from torch.utils._python_dispatch import (  # noqa: F401
            TorchDispatchMode,
            _disable_current_modes,
        )
    except ImportError:
        return "`TorchDispatchMode` (how ops are recorded)"
    return None


# --------------------------------------------------------------------------- the hooks
#
# Each `_hook_*` function installs one hook and returns what it replaced, as
# [(name in torch.utils.checkpoint, original)], so that a mode whose hooks do not all install
# is put back as it was.

def _replace(name: str, value) -> list[tuple[str, Any]]:
    original = getattr(_cp, name)
    setattr(_cp, name, value)
    return [(name, original)]


def _hook_frame() -> list[tuple[str, Any]]:
    """`_CheckpointFrame`: a non-reentrant call begins. Its builder (the generator) holds the
    checkpointed function, its inputs and `preserve_rng_state` as local variables."""
    Original = _cp._CheckpointFrame

    class WatchedFrame(Original):
        def __init__(self, recompute_fn, *rest, **kw):
            super().__init__(recompute_fn, *rest, **kw)
            self._ckptlint_call = None
            self._ckptlint_hooked = False
            try:
                self._ckptlint_call = _begin_non_reentrant(sys._getframe(1), recompute_fn)
                _state.last_frame = weakref.ref(self)   # weak: never keep inputs alive
            except Exception as exc:
                _report_observer_failure(self, "frame", exc)

    WatchedFrame.__name__ = WatchedFrame.__qualname__ = Original.__name__
    return _replace("_CheckpointFrame", WatchedFrame)


def _begin_non_reentrant(builder: types.FrameType, recompute_fn) -> CheckpointCall | None:
    local = builder.f_locals
    fn = local.get("fn")
    if fn is None:
        fn = _closure_values(recompute_fn).get("fn")
    args = tuple(local.get("args") or ())
    kwargs = local.get("kwargs")
    call = new_call("non-reentrant", fn, args, local.get("preserve_rng_state", True),
                    torch.is_grad_enabled(), builder.f_back, kwargs=kwargs)
    if call is not None:
        # The forward's `context_fn` context (a selective-checkpoint policy mode), entered
        # right after the forward pass starts: observers may look at it.
        call.scratch["forward_context"] = local.get("forward_context")
    if call is not None and REPLAY_NOW:
        _keep_for_replay_now(call, fn, args, kwargs)
    return call


def _hook_forward() -> list[tuple[str, Any]]:
    """`_checkpoint_hook`: the forward pass of a call with gradients on, and what it saves."""
    Original = _cp._checkpoint_hook

    class WatchedHook(Original):
        def __init__(self, frame, *rest, **kw):
            super().__init__(frame, *rest, **kw)
            self._ckptlint_scope = None
            self._ckptlint_call = call = getattr(frame, "_ckptlint_call", None)
            if call is not None:
                frame._ckptlint_hooked = True
                self.pack_hook = _watching_pack(self.pack_hook, call, "forward")

        def __enter__(self):
            result = super().__enter__()
            if self._ckptlint_call is not None:
                self._ckptlint_scope = PassScope(self._ckptlint_call, "forward").start()
            return result

        def __exit__(self, exc_type, exc, tb):
            if self._ckptlint_scope is not None:
                self._ckptlint_scope.end(exc)
            result = super().__exit__(exc_type, exc, tb)
            if REPLAY_NOW and exc_type is None and self._ckptlint_scope is not None:
                _replay_now(self._ckptlint_call, grad=True)
            return result

    WatchedHook.__name__ = WatchedHook.__qualname__ = Original.__name__
    return _replace("_checkpoint_hook", WatchedHook)


def _hook_replay() -> list[tuple[str, Any]]:
    """`_recomputation_hook`: the replay during backward, what it saves, and whether it
    stopped early (after the last tensor the forward saved)."""
    Original = _cp._recomputation_hook
    StopRecomputation = _cp._StopRecomputationError

    class WatchedRecomputation(Original):
        def __init__(self, target_frame_ref, gid, *rest, **kw):
            super().__init__(target_frame_ref, gid, *rest, **kw)
            self._ckptlint_scope = None
            self._ckptlint_call = call = getattr(target_frame_ref(), "_ckptlint_call", None)
            if call is not None:
                self.pack_hook = _watching_pack(self.pack_hook, call, "replay")

        def __enter__(self):
            result = super().__enter__()
            if self._ckptlint_call is not None:
                self._ckptlint_scope = PassScope(self._ckptlint_call, "replay").start()
            return result

        def __exit__(self, exc_type, exc, tb):
            if self._ckptlint_scope is not None:
                early = exc_type is not None and issubclass(exc_type, StopRecomputation)
                self._ckptlint_scope.end(None if early else exc, early_stopped=early)
            return super().__exit__(exc_type, exc, tb)

    WatchedRecomputation.__name__ = WatchedRecomputation.__qualname__ = Original.__name__
    return _replace("_recomputation_hook", WatchedRecomputation)


def _hook_no_grad_forwards() -> list[tuple[str, Any]]:
    """The generator that builds `_CheckpointFrame`: a forward under no_grad enters no
    saved-tensor hook, so only the generator shows where it starts and ends."""
    replaced: list[tuple[str, Any]] = []
    for name, _ in _frame_builders():
        replaced += _replace(name, _watching_generator(getattr(_cp, name)))
    return replaced


def _watching_generator(original):
    @functools.wraps(original)
    def watched(*args, **kwargs):
        return _NoGradForward(original(*args, **kwargs))
    return watched


class _NoGradForward:
    """Wraps the non-reentrant generator: its first step builds the frame and, with
    gradients off, runs no hook, so the forward is bracketed here (and rerun for
    --replay-now)."""

    def __init__(self, inner):
        self.inner, self.started, self.scope, self.call = inner, False, None, None

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        if not self.started:
            self.started = True
            _state.last_frame = None
            result = self.inner.send(value)
            ref = getattr(_state, "last_frame", None)
            _state.last_frame = None
            frame = ref() if ref is not None else None
            call = getattr(frame, "_ckptlint_call", None)
            if call is not None and not frame._ckptlint_hooked:
                self.call = call
                self.scope = PassScope(call, "forward").start()
            return result
        if self.scope is not None:
            self.scope.end(None)
            self.scope = None
            if REPLAY_NOW:
                _replay_now(self.call, grad=False)
        return self.inner.send(value)

    def throw(self, *exc):
        if self.scope is not None:
            self.scope.end(exc[1] if len(exc) > 1 else exc[0])
            self.scope = None
        return self.inner.throw(*exc)

    def close(self):
        return self.inner.close()


class _ReentrantRunner:
    """Stands in for `run_function` inside CheckpointFunction: first call is the forward."""

    def __init__(self, call: CheckpointCall, fn):
        self.call, self.fn, self.calls = call, fn, 0

    def __call__(self, *args):
        self.calls += 1
        phase = "forward" if self.calls == 1 else "replay"
        if phase == "forward" and REPLAY_NOW:
            _keep_for_replay_now(self.call, self.fn, args, None)
        scope = PassScope(self.call, phase).start()
        try:
            out = self.fn(*args)
        except BaseException as exc:
            scope.end(exc)
            raise
        scope.end(None)
        if phase == "forward" and REPLAY_NOW:
            _replay_now(self.call, grad=False)
        return out


def _hook_checkpoint_function() -> list[tuple[str, Any]]:
    """`CheckpointFunction`: a reentrant call; its `run_function` runs the forward (under
    no_grad) and, during backward, the replay."""
    Original = _cp.CheckpointFunction

    class WatchedCheckpointFunction(Original):
        @staticmethod
        def forward(ctx, run_function, preserve_rng_state, *args):
            grad = getattr(_state, "grad_before_apply", True)
            call = new_call("reentrant", run_function, args, preserve_rng_state, grad,
                            sys._getframe(1))
            if call is None:
                return Original.forward(ctx, run_function, preserve_rng_state, *args)
            return Original.forward(ctx, _ReentrantRunner(call, run_function),
                                    preserve_rng_state, *args)

        @classmethod
        def apply(cls, *args, **kwargs):
            _state.grad_before_apply = torch.is_grad_enabled()
            return super().apply(*args, **kwargs)

    WatchedCheckpointFunction.__name__ = "CheckpointFunction"
    WatchedCheckpointFunction.__qualname__ = "CheckpointFunction"
    return _replace("CheckpointFunction", WatchedCheckpointFunction)


# --------------------------------------------------------------------------- detection

@dataclass(frozen=True)
class Hook:
    """One internal: which calls need it, its feature test, how it is installed. Without an
    optional hook less is seen (`limit` says what), and nothing is reported as an error."""

    mode: str
    needs: Callable[[], str | None]
    install: Callable[[], list[tuple[str, Any]]]
    limit: str | None = None


HOOKS = (
    Hook("non-reentrant", _needs_frame, _hook_frame),
    Hook("non-reentrant", _needs_forward_hook, _hook_forward),
    Hook("non-reentrant", _needs_replay_hook, _hook_replay),
    Hook("non-reentrant", _needs_no_grad_forwards, _hook_no_grad_forwards,
         limit="non-reentrant forwards under no_grad (and their --replay-now)"),
    Hook("reentrant", _needs_checkpoint_function, _hook_checkpoint_function),
)
MODES = ("non-reentrant", "reentrant")


def _missing(hook: Hook) -> str | None:
    try:
        return hook.needs()
    except Exception as exc:   # a torch too different to even inspect
        return f"{hook.needs.__name__[len('_needs_'):]} ({exc!r})"


def detect() -> tuple[dict[str, Any], dict[str, str]]:
    """What this torch provides for the hooks; for each mode that cannot be watched, why.

    features: {"torch": version, "non-reentrant": bool, "reentrant": bool,
               "dispatch_mode": bool, "limits": {what is not seen: why}}"""
    features: dict[str, Any] = {"torch": torch.__version__, "limits": {}}
    errors: dict[str, str] = {}
    dispatch = _needs_dispatch_mode()
    features["dispatch_mode"] = dispatch is None
    for mode in MODES:
        reasons = []
        for hook in HOOKS:
            if hook.mode != mode:
                continue
            reason = _missing(hook)
            if reason is not None and hook.limit is None:
                reasons.append(reason)
            elif reason is not None:
                features["limits"][hook.limit] = f"torch {torch.__version__} lacks {reason}"
        if dispatch is not None:
            reasons.append(dispatch)
        features[mode] = not reasons
        if reasons:
            errors[mode] = (f"torch {torch.__version__} lacks the {mode} checkpoint internals "
                            f"ckptlint hooks: {'; '.join(reasons)}")
    return features, errors


def install(replay_now: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Detect and hook; idempotent. Returns (features, errors by mode)."""
    global _installed, REPLAY_NOW, FEATURES, ERRORS
    if _installed:
        return FEATURES, ERRORS
    _installed = True
    REPLAY_NOW = replay_now
    FEATURES, ERRORS = detect()
    for mode in MODES:
        if FEATURES[mode]:
            _install_mode(mode)
    _watch_compile()
    _watch_compiled_checkpoints()
    return FEATURES, ERRORS


def _install_mode(mode: str) -> None:
    """Every hook of `mode` that this torch provides, or none (a failure puts back what was
    replaced, and the mode's calls are reported as not watched)."""
    replaced: list[tuple[str, Any]] = []
    for hook in HOOKS:
        if hook.mode != mode or (hook.limit is not None and hook.limit in FEATURES["limits"]):
            continue
        try:
            replaced += hook.install()
        except Exception as exc:
            for name, original in reversed(replaced):
                setattr(_cp, name, original)
            FEATURES[mode] = False
            ERRORS[mode] = f"installing the {mode} hooks failed at {hook.install.__name__}: {exc!r}"
            return


def _watch_compile():
    """Note where torch.compile is used: checkpoints inside compiled code are not watched."""
    orig = getattr(torch, "compile", None)
    if orig is None or getattr(orig, "_ckptlint", False):
        return

    def compile(*args, **kwargs):
        _notify("compile_used", _call_site(sys._getframe(1)))
        return orig(*args, **kwargs)

    compile._ckptlint = True
    compile.__wrapped__ = orig
    compile.__doc__ = orig.__doc__
    torch.compile = compile


def _watch_compiled_checkpoints() -> None:
    """torch.compile turns a checkpoint into the `tag_activation_checkpoint` higher-order op.
    Where the op runs its graph through `checkpoint`, `new_call` sees the graph and reports
    the site as not watched; where it runs the graph without one (releases before 2.13 do
    when no `context_fn` is given), no checkpoint call happens, so the op itself reports it
    once it returned without one."""
    try:
        from torch._higher_order_ops.wrap import TagActivationCheckpoint
    except Exception:
        return
    original = TagActivationCheckpoint.__call__
    if getattr(original, "_ckptlint", False):
        return

    @functools.wraps(original)
    def __call__(self, gmod, *args, **kwargs):
        noted = getattr(_state, "compiled_noted", 0)
        out = original(self, gmod, *args, **kwargs)
        if getattr(_state, "compiled_noted", 0) == noted:
            try:
                _note_compiled(sys._getframe(1), COMPILED_REASON, gmod)
            except Exception as exc:
                _report_observer_failure(self, "__call__", exc)
        return out

    __call__._ckptlint = True
    TagActivationCheckpoint.__call__ = __call__
