"""The one place that knows torch's checkpoint internals (loaded only in the watched child).

It patches the names that torch looks up *at call time*, never the public `checkpoint`
function (which callers may have bound earlier with `from ... import checkpoint`):

  non-reentrant  `torch.utils.checkpoint._CheckpointFrame`   (a call begins; fn, args)
                 `torch.utils.checkpoint._checkpoint_hook`    (forward pass, saved tensors)
                 `torch.utils.checkpoint._recomputation_hook` (replay pass, saved tensors)
                 `torch.utils.checkpoint._checkpoint_without_reentrant_generator`
                     (only to see no-grad forwards for --replay-now; optional)
  reentrant      `torch.utils.checkpoint.CheckpointFunction`

`checkpoint`, `checkpoint_sequential`, `checkpoint_wrapper`/`apply_activation_checkpointing`,
`torch.distributed._composable.checkpoint` and transformers layers all funnel into these.
What is present is found by feature detection (`detect()`), not by a version list; what is
missing is reported with a reason, and the calls that would need it get `error` verdicts.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
import types
import weakref
from typing import Any

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
    import functools
    if isinstance(fn, functools.partial):
        return targets_of(fn.func, depth + 1)
    if isinstance(fn, torch.nn.Module):
        forward = getattr(type(fn), "forward", None)
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
    code = getattr(fn, "__code__", None)
    if code is not None:
        if not _in_torch(code):
            return [_code_target(code)]
        # A closure made inside torch (checkpoint_sequential's run_function, the
        # checkpoint_wrapper kwargs packer): look at what it closes over.
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in (fn.__closure__ or ())
                                             if _cell_ok(c))))
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


def _cell_ok(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def module_of(fn: Any):
    import functools
    while isinstance(fn, functools.partial):
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
    if _is_compiling():
        _notify("not_watched", _call_site(caller), "traced by torch.compile")
        return None
    if _is_graph_module(fn):
        _notify("not_watched", _call_site(caller),
                "checkpoint traced by torch.compile: it runs as a compiled higher-order op, "
                "so its forward and replay are not the user's eager code")
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


def _is_graph_module(fn) -> bool:
    import functools
    while isinstance(fn, functools.partial):
        fn = fn.func
    fx = getattr(torch, "fx", None)
    graph_module = getattr(fx, "GraphModule", None)
    owner = getattr(fn, "__self__", fn)
    return graph_module is not None and isinstance(owner, graph_module)


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
        import random
        self.py_state = random.getstate()
        numpy = sys.modules.get("numpy")
        self.np_state = numpy.random.get_state() if numpy is not None else None
        self.fork.__enter__()
        return self

    def __exit__(self, *exc):
        import random
        try:
            return self.fork.__exit__(*exc)
        finally:
            random.setstate(self.py_state)
            numpy = sys.modules.get("numpy")
            if numpy is not None and self.np_state is not None:
                numpy.random.set_state(self.np_state)


# --------------------------------------------------------------------------- non-reentrant

def _install_non_reentrant():
    OrigFrame = _cp._CheckpointFrame
    OrigHook = _cp._checkpoint_hook
    OrigRecomp = _cp._recomputation_hook
    OrigGen = _cp._checkpoint_without_reentrant_generator

    class WatchedFrame(OrigFrame):
        def __init__(self, recompute_fn, *rest, **kw):
            super().__init__(recompute_fn, *rest, **kw)
            self._ckptlint_call = None
            self._ckptlint_hooked = False
            try:
                caller = sys._getframe(1)
                local = caller.f_locals
                fn = local.get("fn")
                args = tuple(local.get("args") or ())
                preserve = local.get("preserve_rng_state", True)
                if fn is None:
                    cells = dict(zip(recompute_fn.__code__.co_freevars,
                                     (c.cell_contents for c in recompute_fn.__closure__ or ()
                                      if _cell_ok(c))))
                    fn = cells.get("fn")
                grad = torch.is_grad_enabled()
                self._ckptlint_call = new_call("non-reentrant", fn, args, preserve, grad,
                                               caller.f_back, kwargs=local.get("kwargs"))
                if self._ckptlint_call is not None and not grad and REPLAY_NOW:
                    self._ckptlint_call.scratch["_args"] = args
                _state.last_frame = weakref.ref(self)   # weak: never keep inputs alive
            except Exception as exc:
                _report_observer_failure(self, "frame", exc)

    class WatchedHook(OrigHook):
        def __init__(self, frame):
            super().__init__(frame)
            self._ckptlint_frame = frame
            self._ckptlint_scope = None
            call = getattr(frame, "_ckptlint_call", None)
            if call is None:
                return
            frame._ckptlint_hooked = True
            orig_pack = self.pack_hook

            def pack_hook(x):
                index = len(frame.weak_holders)
                _saved(call, "forward", index, x)
                return orig_pack(x)

            self.pack_hook = pack_hook

        def __enter__(self):
            super().__enter__()
            call = getattr(self._ckptlint_frame, "_ckptlint_call", None)
            if call is not None:
                self._ckptlint_scope = PassScope(call, "forward").start()

        def __exit__(self, exc_type, exc, tb):
            if self._ckptlint_scope is not None:
                self._ckptlint_scope.end(exc)
            result = super().__exit__(exc_type, exc, tb)
            if REPLAY_NOW and exc_type is None and self._ckptlint_scope is not None:
                _replay_now_non_reentrant(self._ckptlint_frame)
            return result

    class WatchedRecomputation(OrigRecomp):
        def __init__(self, target_frame_ref, gid, *rest, **kw):
            super().__init__(target_frame_ref, gid, *rest, **kw)
            frame = target_frame_ref()
            self._ckptlint_call = call = getattr(frame, "_ckptlint_call", None)
            self._ckptlint_scope = None
            if call is None:
                return
            orig_pack = self.pack_hook

            def pack_hook(x):
                _saved(call, "replay", frame.recomp_counter[gid], x)
                return orig_pack(x)

            self.pack_hook = pack_hook

        def __enter__(self):
            super().__enter__()
            if self._ckptlint_call is not None:
                self._ckptlint_scope = PassScope(self._ckptlint_call, "replay").start()

        def __exit__(self, exc_type, exc, tb):
            if self._ckptlint_scope is not None:
                early = exc_type is not None and issubclass(exc_type, _cp._StopRecomputationError)
                self._ckptlint_scope.end(None if early else exc, early_stopped=early)
            return super().__exit__(exc_type, exc, tb)

    class GenWrapper:
        """Wraps the non-reentrant generator to see a no-grad forward (and rerun it for
        --replay-now)."""

        def __init__(self, inner):
            self.inner, self.step, self.scope, self.frame = inner, 0, None, None

        def __iter__(self):
            return self

        def __next__(self):
            return self.send(None)

        def send(self, value):
            if self.step == 0:
                self.step = 1
                _state.last_frame = None
                result = self.inner.send(value)
                ref = getattr(_state, "last_frame", None)
                _state.last_frame = None
                frame = ref() if ref is not None else None
                call = getattr(frame, "_ckptlint_call", None)
                if call is not None and not frame._ckptlint_hooked:
                    self.frame = frame
                    self.scope = PassScope(call, "forward").start()
                return result
            if self.scope is not None:
                self.scope.end(None)
                self.scope = None
                if REPLAY_NOW:
                    _replay_now_no_grad(self.frame)
            return self.inner.send(value)

        def throw(self, *exc):
            if self.scope is not None:
                self.scope.end(exc[1] if len(exc) > 1 else exc[0])
                self.scope = None
            return self.inner.throw(*exc)

        def close(self):
            return self.inner.close()

    def watched_generator(*args, **kwargs):
        return GenWrapper(OrigGen(*args, **kwargs))

    _cp._CheckpointFrame = WatchedFrame
    _cp._checkpoint_hook = WatchedHook
    _cp._recomputation_hook = WatchedRecomputation
    # Only `checkpoint()` looks this name up at call time; it shows us no-grad forwards,
    # which install no saved-tensor hooks (composable checkpoint binds its own copy).
    _cp._checkpoint_without_reentrant_generator = watched_generator


def _replay_now_non_reentrant(frame):
    call = frame._ckptlint_call
    counter = [0]

    def pack(x):
        _saved(call, "replay_now", counter[0], x)
        counter[0] += 1
        return x

    try:
        args = frame.get_inputs()
        scope = PassScope(call, "replay_now")
        error = None
        with _rng_fork_for(args), torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            scope.start()
            try:
                with torch.enable_grad():
                    frame.recompute_fn(*args)
            except Exception as exc:
                error = exc
            finally:
                scope.end(error)
    except Exception as exc:
        _report_observer_failure(frame, "replay_now", exc)


def _replay_now_no_grad(frame):
    call = frame._ckptlint_call
    args = call.scratch.pop("_args", None)
    if args is None:
        return
    try:
        scope = PassScope(call, "replay_now")
        error = None
        with _rng_fork_for(args):
            scope.start()
            try:
                with torch.no_grad():
                    frame.recompute_fn(*args)
            except Exception as exc:
                error = exc
            finally:
                scope.end(error)
    except Exception as exc:
        _report_observer_failure(frame, "replay_now", exc)


# --------------------------------------------------------------------------- reentrant

class _ReentrantRunner:
    """Stands in for `run_function` inside CheckpointFunction: first call is the forward."""

    def __init__(self, call: CheckpointCall, fn):
        self.call, self.fn, self.calls = call, fn, 0

    def __call__(self, *args):
        self.calls += 1
        phase = "forward" if self.calls == 1 else "replay"
        rng = None
        if phase == "forward" and REPLAY_NOW:
            rng = _capture_rng(args)
        scope = PassScope(self.call, phase).start()
        try:
            out = self.fn(*args)
        except BaseException as exc:
            scope.end(exc)
            raise
        scope.end(None)
        if rng is not None:
            self._replay_now(args, rng)
        return out

    def _replay_now(self, args, rng):
        try:
            with _rng_fork_for(args):
                if self.call.preserve_rng_state:
                    _restore_rng(rng)
                scope = PassScope(self.call, "replay_now").start()
                error = None
                try:
                    with torch.no_grad():
                        self.fn(*args)
                except Exception as exc:
                    error = exc
                finally:
                    scope.end(error)
        except Exception as exc:
            _report_observer_failure(self, "replay_now", exc)


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
        _cp.set_device_states(devices, states, device_type=device_type)


def _install_reentrant():
    Orig = _cp.CheckpointFunction

    class WatchedCheckpointFunction(Orig):
        @staticmethod
        def forward(ctx, run_function, preserve_rng_state, *args):
            grad = getattr(_state, "grad_before_apply", True)
            call = new_call("reentrant", run_function, args, preserve_rng_state, grad,
                            sys._getframe(1))
            if call is None:
                return Orig.forward(ctx, run_function, preserve_rng_state, *args)
            return Orig.forward(ctx, _ReentrantRunner(call, run_function),
                                preserve_rng_state, *args)

        @classmethod
        def apply(cls, *args, **kwargs):
            _state.grad_before_apply = torch.is_grad_enabled()
            return super().apply(*args, **kwargs)

    WatchedCheckpointFunction.__name__ = "CheckpointFunction"
    WatchedCheckpointFunction.__qualname__ = "CheckpointFunction"
    _cp.CheckpointFunction = WatchedCheckpointFunction


# --------------------------------------------------------------------------- detection

def _nested_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _nested_names(const)
    return names


def detect() -> tuple[dict[str, Any], dict[str, str]]:
    """What this torch provides for the hooks; reasons for whatever is missing."""
    features: dict[str, Any] = {"torch": torch.__version__}
    errors: dict[str, str] = {}
    missing = []
    gen = getattr(_cp, "_checkpoint_without_reentrant_generator", None)
    hook = getattr(_cp, "_checkpoint_hook", None)
    recomp = getattr(_cp, "_recomputation_hook", None)
    frame_cls = getattr(_cp, "_CheckpointFrame", None)
    base = getattr(torch.autograd.graph, "saved_tensors_hooks", None)
    for name, value in (("_checkpoint_without_reentrant_generator", gen),
                        ("_checkpoint_hook", hook), ("_recomputation_hook", recomp),
                        ("_CheckpointFrame", frame_cls)):
        if value is None:
            missing.append(name)
    if not missing:
        gen_names = _nested_names(gen.__code__)
        hook_names = _nested_names(hook.__init__.__code__)
        if not {"_CheckpointFrame", "_checkpoint_hook"} <= gen_names:
            missing.append("call-time lookup of _CheckpointFrame/_checkpoint_hook in the generator")
        if "_recomputation_hook" not in hook_names:
            missing.append("call-time lookup of _recomputation_hook in _checkpoint_hook")
        if base is None or not (isinstance(hook, type) and issubclass(hook, base)
                                and issubclass(recomp, base)):
            missing.append("saved_tensors_hooks-based _checkpoint_hook")
        if "fn" not in gen.__code__.co_varnames:
            missing.append("`fn` argument of the non-reentrant generator")
    if missing:
        errors["non-reentrant"] = (f"torch {torch.__version__} lacks the non-reentrant checkpoint "
                                   f"internals ckptlint hooks: {', '.join(missing)}")
    features["non-reentrant"] = not missing

    cf = getattr(_cp, "CheckpointFunction", None)
    checkpoint_fn = getattr(_cp, "checkpoint", None)
    if checkpoint_fn is not None:
        import inspect
        checkpoint_fn = inspect.unwrap(checkpoint_fn)
    ok = (isinstance(cf, type) and issubclass(cf, torch.autograd.Function)
          and checkpoint_fn is not None and "CheckpointFunction" in checkpoint_fn.__code__.co_names
          and cf.forward.__code__.co_varnames[:3] == ("ctx", "run_function", "preserve_rng_state"))
    if not ok:
        errors["reentrant"] = (f"torch {torch.__version__} lacks a CheckpointFunction(ctx, "
                               "run_function, preserve_rng_state, *args) looked up at call time")
    features["reentrant"] = ok
    try:
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
        features["dispatch_mode"] = True
    except ImportError:
        features["dispatch_mode"] = False
        errors.setdefault("non-reentrant", "torch lacks TorchDispatchMode")
        errors.setdefault("reentrant", "torch lacks TorchDispatchMode")
    return features, errors


def install(replay_now: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Detect and patch; idempotent. Returns (features, errors by mode)."""
    global _installed, REPLAY_NOW, FEATURES, ERRORS
    if _installed:
        return FEATURES, ERRORS
    _installed = True
    REPLAY_NOW = replay_now
    FEATURES, ERRORS = detect()
    if FEATURES.get("non-reentrant") and FEATURES.get("dispatch_mode"):
        try:
            _install_non_reentrant()
        except Exception as exc:
            ERRORS["non-reentrant"] = f"installing the non-reentrant hooks failed: {exc!r}"
    if FEATURES.get("reentrant") and FEATURES.get("dispatch_mode"):
        try:
            _install_reentrant()
        except Exception as exc:
            ERRORS["reentrant"] = f"installing the reentrant hook failed: {exc!r}"
    _watch_compile()
    return FEATURES, ERRORS


def _watch_compile():
    """Note where torch.compile is used: checkpoints inside compiled code are not watched."""
    orig = getattr(torch, "compile", None)
    if orig is None or getattr(orig, "_ckptlint", False):
        return

    def compile(*args, **kwargs):
        _notify("not_watched", _call_site(sys._getframe(1)),
                "torch.compile used here: checkpoints inside compiled code run as a compiled "
                "higher-order op that ckptlint cannot watch")
        return orig(*args, **kwargs)

    compile._ckptlint = True
    compile.__wrapped__ = orig
    compile.__doc__ = orig.__doc__
    torch.compile = compile
