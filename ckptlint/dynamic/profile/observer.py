"""The `profile` observer (child side): what each checkpoint call frees and costs.

Registered in the child through `run_watched(observers=["...profile_observer:observer"],
record=False)`, in place of the dynamic-mode recorder, so profiling pays for no op-by-op
dispatch mode. Per checkpoint call it writes JSON lines to
CKPTLINT_PROFILE_OUT (options in CKPTLINT_PROFILE_OPTIONS, a JSON object):

  {"ev": "start", "pid", "torch", "features", "errors", "argv"}
  {"ev": "call", "id", "pid", "mode", "site": [f, r, c] | null, "targets", "grad",
   "preserve_rng_state", "device"}
  {"ev": "pass", "call", "pid", "phase", "n", "seconds", "bytes", "saved", "excluded",
   "early_stop", "error", "match", "matters", "text", "timer"}
  {"ev": "grad", "call", "pid", "diff", "close", "error", "checked"}
  {"ev": "peak", "call", "pid", "plain", "checkpointed", "saved", "error"}
  {"ev": "not_watched", "pid", "site", "reason"}

What it measures, and why it costs (almost) nothing extra:
- bytes freed: the distinct untyped storages packed for backward, minus the storages of the
  call's inputs, parameters and buffers. Non-reentrant: the adapter's pack hooks already see
  every saved tensor, in the forward and in the replay. Reentrant: the forward runs under
  `no_grad` and saves nothing, so the replay (an ordinary forward under `enable_grad` inside
  the backward) is bracketed with an identity `saved_tensors_hooks` that only looks at what
  autograd packs; the tensors are kept exactly as without it.
- seconds: the adapter's per-pass wall time, minus the time spent in this observer's own hooks;
  on CUDA, events recorded on the current stream at both ends of the pass, read once they
  have completed (never a synchronisation inside the training loop; the rest at exit).
- replay divergence: per saved activation its shape, dtype, device and the digest of its
  values that dynamic mode takes (digest.py), reading at most 65,536 of them, forward vs replay;
  a non-reentrant replay that stops early is a prefix of the forward. Reentrant forwards save
  nothing, so only --grad-check sees their divergence.
- --grad-check / --measure-peak run the segment again (plain and checkpointed) right before
  its real forward, under a fork of every RNG (torch CPU and devices, Python, NumPy) set to
  the state the real forward starts from; module buffers and module attributes (rebinding and
  list/dict/set contents) are put back afterwards, but other Python side effects of the
  segment (globals, closures, logging, I/O) happen again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import sys
import threading
import time
import warnings
from typing import Any

import torch

from ckptlint.dynamic.watch.compare import same_digest
from ckptlint.dynamic.watch.digest import digest, resolve
from ckptlint.dynamic.watch.observer import CheckpointCall, Observer, PassEnd

try:
    from torch.utils._python_dispatch import _disable_current_modes
except ImportError:  # pragma: no cover - older torch
    _disable_current_modes = contextlib.nullcontext

GRAD_CHECK_CALLS = 3      # calls per site that --grad-check reruns
RTOL, ATOL = 1e-5, 1e-6   # torch.allclose tolerances for --grad-check

_local = threading.local()


def _busy() -> bool:
    return getattr(_local, "busy", False)


@contextlib.contextmanager
def _extra_run():
    """Marks our own reruns: checkpoint calls made inside them are not profiled."""
    _local.busy = True
    try:
        yield
    finally:
        _local.busy = False


@contextlib.contextmanager
def _quiet_rerun(args):
    """One of our own reruns of a segment, from the RNG state its real forward started from:
    not profiled, warnings silenced, tensors saved as they are, gradients on. Yields the
    `_SameRng` that puts the random streams back before each rerun."""
    with _extra_run(), _SameRng(args) as rng, warnings.catch_warnings(), \
            torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x), \
            torch.enable_grad():
        warnings.simplefilter("ignore")
        yield rng


# --------------------------------------------------------------------------- tensors

def _tensors(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _storage(t: torch.Tensor):
    """((device, data_ptr), nbytes) of a tensor's untyped storage, or None."""
    try:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        nbytes = storage.nbytes()
    except Exception:
        return None
    if not nbytes:
        return None
    return (str(t.device), ptr), nbytes


def _is_parameter(t: torch.Tensor) -> bool:
    if isinstance(t, torch.nn.Parameter):
        return True
    base = getattr(t, "_base", None)
    if isinstance(base, torch.nn.Parameter):
        return True
    # A leaf that requires grad is a parameter in all but name (e.g. a bare weight tensor).
    return t.is_leaf and t.requires_grad


def _modules_of(fn, depth: int = 0, out: list | None = None) -> list:
    """The nn.Modules a checkpointed callable runs: its owner, partial targets, closures."""
    import functools
    out = [] if out is None else out
    if fn is None or depth > 4:
        return out
    if isinstance(fn, torch.nn.Module):
        if not any(fn is m for m in out):
            out.append(fn)
        return out
    if isinstance(fn, functools.partial):
        _modules_of(fn.func, depth + 1, out)
        for value in list(fn.args) + list((fn.keywords or {}).values()):
            if isinstance(value, torch.nn.Module):
                _modules_of(value, depth + 1, out)
        return out
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return _modules_of(owner, depth + 1, out)
    closure = getattr(fn, "__closure__", None) or ()
    for cell in closure:
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, torch.nn.Module):
            _modules_of(value, depth + 1, out)
        elif isinstance(value, (list, tuple)) and value and all(
                isinstance(v, torch.nn.Module) for v in value):
            for v in value:
                _modules_of(v, depth + 1, out)
        elif callable(value) and not isinstance(value, type):
            _modules_of(value, depth + 1, out)
    return out


def _params_and_buffers(modules):
    params, buffers, seen = [], [], set()
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        for b in module.buffers():
            if id(b) not in seen:
                seen.add(id(b))
                buffers.append(b)
    return params, buffers


SAMPLE = 1 << 16   # values per saved tensor that the digest reads (digest.py)


def _compare(forward: list, replay: list, early_stop: bool) -> tuple[bool, str]:
    """(match, text): the first saved tensor whose metadata or values differ; a replay that
    stops early is a prefix of the forward (torch itself rejects a count that differs)."""
    for f, r in zip(forward, replay):
        fmeta = (f["shape"], f["dtype"], f["device"])
        rmeta = (r["shape"], r["dtype"], r["device"])
        if fmeta != rmeta:
            return False, (f"saved tensor #{r['i']} is {r['dtype']}{r['shape']} on "
                           f"{r['device']} where the forward saved {f['dtype']}{f['shape']} "
                           f"on {f['device']}")
        if not same_digest(f["d"], r["d"]):
            return False, (f"saved tensor #{r['i']} ({r['dtype']}{r['shape']}) has other values "
                           f"than in the forward")
    if len(replay) > len(forward) or (len(replay) < len(forward) and not early_stop):
        return False, f"saved {len(replay)} tensors where the forward saved {len(forward)}"
    return True, "matched"


# --------------------------------------------------------------------------- per call

class _Pass:
    __slots__ = ("storages", "excluded", "saved", "hook_seconds", "start_event")

    def __init__(self):
        self.storages: dict = {}
        self.excluded: dict = {}
        self.saved: list = []
        self.hook_seconds = 0.0
        self.start_event = None


class _CallState:
    __slots__ = ("excluded", "device", "cuda", "passes", "forward", "mode")

    def __init__(self, excluded: set, device: torch.device | None, mode: str):
        self.excluded = excluded
        self.device = device
        self.cuda = device is not None and device.type == "cuda"
        self.passes: dict[str, _Pass] = {}
        self.forward: list | None = None
        self.mode = mode


def observer() -> "ProfileObserver":
    """The factory the child calls (`run_watched(observers=[...:observer], record=False)`);
    also writes the start event, with what the adapter could and could not hook."""
    from ckptlint.dynamic.watch import torch_adapter
    from ckptlint.dynamic.watch.recorder import start_event
    obs = ProfileObserver()
    obs.emit(start_event(dict(torch_adapter.FEATURES), dict(torch_adapter.ERRORS)))
    return obs


class ProfileObserver(Observer):
    def __init__(self, out: str | None = None, plan: dict[str, Any] | None = None):
        path = os.environ.get("CKPTLINT_PROFILE_OUT") or out
        if not path:
            raise RuntimeError("CKPTLINT_PROFILE_OUT is not set")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            options = json.loads(os.environ.get("CKPTLINT_PROFILE_OPTIONS") or "{}")
        except ValueError:
            options = {}
        self.grad_check = bool(options.get("grad_check"))
        self.measure_peak = bool(options.get("measure_peak"))
        self.grad_calls = int(options.get("grad_check_calls", GRAD_CHECK_CALLS))
        self.checked: dict[Any, int] = {}
        self.peaked: set = set()
        self.pending: list = []       # (cuda event | None, callback), resolved in order
        self.lock = threading.RLock()
        atexit.register(self.flush)

    def emit(self, event: dict[str, Any]) -> None:
        event.setdefault("pid", os.getpid())   # not cached: forked workers inherit us
        line = json.dumps(event, default=str) + "\n"
        os.write(self.fd, line.encode("utf-8", "replace"))

    # -- deferred CUDA results
    def _defer(self, event, callback) -> None:
        with self.lock:
            self.pending.append((event, callback))
        self._drain(block=False)

    def _drain(self, block: bool) -> None:
        # One drainer at a time (the lock is reentrant for appends from callbacks), so that
        # the callbacks run in pass order even when the replay ends on autograd's device thread.
        with self.lock:
            while self.pending:
                event, callback = self.pending[0]
                try:
                    if event is not None:
                        if block:
                            event.synchronize()
                        elif not event.query():
                            return
                except Exception:
                    pass
                self.pending.pop(0)
                try:
                    callback()
                except Exception as exc:
                    print(f"ckptlint profile: could not read a CUDA measurement: {exc!r}",
                          file=sys.stderr)

    def flush(self) -> None:
        self._drain(block=True)

    # -- observer hooks
    def call_started(self, call: CheckpointCall) -> None:
        if _busy():
            return
        args = call.scratch.get("args")
        if args is None:
            args = getattr(call, "args", ()) or ()
        kwargs = call.scratch.get("kwargs") or {}
        tensors = list(_tensors(args)) + list(_tensors(kwargs))
        modules = _modules_of(call.fn)
        params, buffers = _params_and_buffers(modules)
        excluded = set()
        for t in (*tensors, *params, *buffers):
            s = _storage(t)
            if s is not None:
                excluded.add(s[0])
        device = next((t.device for t in tensors if t.device.type not in ("cpu", "meta")), None)
        if device is None and tensors:
            device = tensors[0].device
        state = _CallState(excluded, device, call.mode)
        call.scratch["profile"] = state
        self.emit({"ev": "call", "id": call.id, "mode": call.mode, "site": call.site,
                   "targets": call.targets, "grad": call.grad_enabled,
                   "preserve_rng_state": call.preserve_rng_state,
                   "device": str(device) if device is not None else None})
        if not call.grad_enabled:
            return
        key = (call.site, tuple(call.targets))
        if self.grad_check and self.checked.get(key, 0) < self.grad_calls:
            self.checked[key] = self.checked.get(key, 0) + 1
            self.emit({"ev": "grad", "call": call.id,
                       **grad_check(call, args, kwargs, modules, params, buffers)})
        if self.measure_peak and state.cuda and key not in self.peaked:
            self.peaked.add(key)
            self.emit({"ev": "peak", "call": call.id,
                       **measure_peak(call, args, kwargs, modules, buffers, device)})

    def pass_started(self, call: CheckpointCall, phase: str):
        state = call.scratch.get("profile")
        if state is None or phase == "replay_now":
            return None
        record = _Pass()
        state.passes[phase] = record
        if state.cuda:
            try:
                record.start_event = torch.cuda.Event(enable_timing=True)
                record.start_event.record()
            except Exception:
                record.start_event = None
        if state.mode == "reentrant" and phase == "replay":
            def pack(x):
                self.tensor_saved(call, phase, len(record.saved), x)
                return x
            return torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x)
        return None

    def tensor_saved(self, call: CheckpointCall, phase: str, index: int, tensor) -> None:
        state = call.scratch.get("profile")
        record = state.passes.get(phase) if state is not None else None
        if record is None:
            return
        t0 = time.perf_counter()
        try:
            s = _storage(tensor)
            held = s is not None and (s[0] in state.excluded or _is_parameter(tensor))
            if held:
                record.excluded[s[0]] = s[1]
            elif s is not None:
                record.storages[s[0]] = s[1]
            entry = {"i": index, "shape": list(tensor.shape),
                     "dtype": str(tensor.dtype).replace("torch.", ""),
                     "device": str(tensor.device), "d": None}
            # Values are compared for activations only: inputs, parameters and buffers are the
            # same tensors in both passes (an in-place change of one between forward and
            # backward is dynamic mode's to find), and weights are often the largest saves.
            if state.mode == "non-reentrant" and not held:
                entry["d"] = digest(tensor, limit=SAMPLE, lazy=state.cuda)
            record.saved.append(entry)
        finally:
            record.hook_seconds += time.perf_counter() - t0

    def pass_ended(self, call: CheckpointCall, phase: str, info: PassEnd) -> None:
        state = call.scratch.get("profile")
        record = state.passes.pop(phase, None) if state is not None else None
        if record is None:
            return
        event = {"ev": "pass", "call": call.id, "phase": phase, "n": call.passes.get(phase, 1),
                 "seconds": max(0.0, info.seconds - record.hook_seconds), "timer": "wall",
                 "bytes": sum(record.storages.values()), "saved": len(record.saved),
                 "excluded": sum(record.excluded.values()), "early_stop": info.early_stopped,
                 "error": _error_text(info.error)}
        end_event = None
        if record.start_event is not None:
            try:
                end_event = torch.cuda.Event(enable_timing=True)
                end_event.record()
            except Exception:
                end_event = None

        def finish():   # runs in pass order (deferred on CUDA), so the forward comes first
            if end_event is not None:
                event["seconds"] = record.start_event.elapsed_time(end_event) / 1000.0
                event["timer"] = "cuda"
            saved = [dict(e, d=resolve(e["d"])) for e in record.saved]
            if phase == "forward":
                state.forward = saved
            elif phase == "replay" and state.mode == "non-reentrant" and \
                    state.forward is not None:
                if event["error"]:
                    match, text = False, f"raised {event['error']}"
                else:
                    match, text = _compare(state.forward, saved, info.early_stopped)
                event.update(match=match, matters=not match, text=text)
            elif phase == "replay" and event["error"]:
                event.update(match=False, matters=True, text=f"raised {event['error']}")
            self.emit(event)

        if end_event is None:
            finish()
        else:
            self._defer(end_event, finish)

    def not_watched(self, site, reason: str, lines=()) -> None:
        self.emit({"ev": "not_watched", "site": site, "reason": reason})

    def compile_used(self, site) -> None:
        self.not_watched(site, "torch.compile used here: checkpoints inside compiled code run "
                               "as a compiled higher-order op that ckptlint cannot profile")


def _error_text(error) -> str | None:
    if error is None:
        return None
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:300]


# --------------------------------------------------------------------------- extra runs

_CONTAINERS = (list, dict, set)


class _Buffers:
    """Puts the segment's modules back as they were after an extra run.

    Buffers: the same tensor objects, and their values where the run changed them (an
    unchanged buffer is not written, so that its version counter, which autograd checks,
    stays as it was). Plain attributes: rebinding undone (`self.cache = ...`), and the
    contents of attribute lists, dicts and sets put back (`self.aux_losses.append(...)`).
    Globals, closures, logging and I/O are not restored: those side effects happen again."""

    def __init__(self, modules):
        self.entries = []
        self.attrs = []
        seen = set()
        for module in modules:
            for sub in module.modules():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                for name, buf in list(sub._buffers.items()):
                    if buf is not None:
                        self.entries.append((sub, name, buf, buf.detach().clone()))
                attrs = {k: v for k, v in sub.__dict__.items()
                         if k not in ("_parameters", "_buffers", "_modules")}
                contents = {k: (list(v) if isinstance(v, list) else
                                dict(v) if isinstance(v, dict) else set(v))
                            for k, v in attrs.items() if type(v) in _CONTAINERS}
                self.attrs.append((sub, attrs, contents))

    def restore(self) -> int:
        changed = 0
        with torch.no_grad(), _disable_current_modes():
            for sub, name, buf, copy in self.entries:
                if sub._buffers.get(name) is not buf:
                    sub._buffers[name] = buf
                    changed += 1
                if not torch.equal(buf, copy):
                    buf.copy_(copy)
                    changed += 1
        for sub, attrs, contents in self.attrs:
            current = sub.__dict__
            for key in [k for k in current if k not in attrs
                        and k not in ("_parameters", "_buffers", "_modules")]:
                del current[key]
                changed += 1
            for key, value in attrs.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
                    changed += 1
                if key in contents and _changed(value, contents[key]):
                    _put_back(value, contents[key])
                    changed += 1
        return changed


_MISSING = object()


def _changed(container, copy) -> bool:
    if len(container) != len(copy):
        return True
    if isinstance(container, list):
        return any(a is not b for a, b in zip(container, copy))
    if isinstance(container, dict):
        return any(container.get(k, _MISSING) is not v for k, v in copy.items())
    return container != copy


def _put_back(container, copy) -> None:
    if isinstance(container, list):
        container[:] = copy
    else:
        container.clear()
        container.update(copy)


class _SameRng:
    """Forks every random stream (torch CPU and the devices in use, Python `random`, NumPy)
    and can put all of them back to the state they had at the start, for each rerun."""

    def __init__(self, args):
        from ckptlint.dynamic.watch.torch_adapter import _rng_fork_for
        self.fork = _rng_fork_for(args)

    def __enter__(self):
        import random
        self.fork.__enter__()
        self.cpu = torch.get_rng_state()
        self.py = random.getstate()
        numpy = sys.modules.get("numpy")
        self.np = numpy.random.get_state() if numpy is not None else None
        self.cuda = None
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                self.cuda = torch.cuda.get_rng_state_all()
        except Exception:
            self.cuda = None
        return self

    def reset(self):
        import random
        torch.set_rng_state(self.cpu)
        random.setstate(self.py)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.np is not None:
            numpy.random.set_state(self.np)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)


def _leaf_copies(args, kwargs):
    """The call's arguments with each floating tensor replaced by a fresh leaf that
    requires grad like the original; returns (args, kwargs, leaves)."""
    leaves = []

    def copy(value, depth=0):
        if isinstance(value, torch.Tensor):
            t = value.detach()
            if value.requires_grad and (t.is_floating_point() or t.is_complex()):
                t = t.requires_grad_(True)
                leaves.append(t)
            return t
        if depth < 4 and isinstance(value, tuple):
            return tuple(copy(v, depth + 1) for v in value)
        if depth < 4 and isinstance(value, list):
            return [copy(v, depth + 1) for v in value]
        if depth < 4 and isinstance(value, dict):
            return {k: copy(v, depth + 1) for k, v in value.items()}
        return value

    return copy(tuple(args)), copy(dict(kwargs)), leaves


def _outputs(out):
    return [t for t in _tensors(out) if t.requires_grad and (t.is_floating_point()
                                                            or t.is_complex())]


def _upstream(outputs):
    """A fixed pseudo-random upstream gradient (its own generator: the global RNG is
    not touched), so that summed outputs cannot hide a difference by cancelling."""
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(o.shape, generator=g, dtype=torch.float32).to(o.device, o.dtype)
            for o in outputs]


def _gradients(call, fn, args, kwargs, params, checkpointed: bool):
    """Gradients of the inputs and parameters for one run (plain or checkpointed)."""
    from torch.utils import checkpoint as cp
    a, k, leaves = _leaf_copies(args, kwargs)
    reentrant = call.mode == "reentrant"
    if checkpointed:
        if reentrant:
            out = cp.checkpoint(fn, *a, use_reentrant=True,
                                preserve_rng_state=call.preserve_rng_state)
        else:
            out = cp.checkpoint(fn, *a, use_reentrant=False,
                                preserve_rng_state=call.preserve_rng_state, **k)
    else:
        out = fn(*a, **k)
    outputs = _outputs(out)
    wrt = leaves + [p for p in params if p.requires_grad]
    if not outputs or not wrt:
        return None, len(wrt)
    grads_out = _upstream(outputs)
    if checkpointed and reentrant:
        # Reentrant checkpoint refuses autograd.grad(); backward() accumulates into .grad,
        # so the parameters' own .grad are set aside and put back.
        kept = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            torch.autograd.backward(outputs, grads_out, retain_graph=True)
            grads = [t.grad for t in wrt]
        finally:
            for p, g in zip(params, kept):
                p.grad = g
        return grads, len(wrt)
    # retain_graph: should the segment hand an output of this run to the program (a side
    # effect), the program's own backward through it must not fail.
    grads = torch.autograd.grad(outputs, wrt, grads_out, allow_unused=True, retain_graph=True)
    return list(grads), len(wrt)


def grad_check(call: CheckpointCall, args, kwargs, modules, params, buffers) -> dict[str, Any]:
    """Gradients of the segment's inputs and parameters, checkpointed vs plain, from the RNG
    state its real forward starts from. Runs the segment twice more (side effects included)."""
    fn = call.fn
    result: dict[str, Any] = {"diff": None, "close": None, "error": None, "checked": 0,
                              "buffers_restored": 0}
    saved_buffers = _Buffers(modules)
    try:
        with _quiet_rerun(args) as rng:
            rng.reset()
            plain, n = _gradients(call, fn, args, kwargs, params, checkpointed=False)
            result["buffers_restored"] += saved_buffers.restore()
            rng.reset()
            try:
                ckpt, _ = _gradients(call, fn, args, kwargs, params, checkpointed=True)
            except Exception as exc:   # e.g. CheckpointError: the replay saved other tensors
                result.update(close=False, diff=math.inf, error=f"checkpointed run: "
                              f"{_error_text(exc)}", checked=n)
                return result
        result["checked"] = n
        if plain is None or ckpt is None:
            result["error"] = "no output or input of the segment requires grad"
            return result
        worst, close = 0.0, True
        with torch.no_grad(), _disable_current_modes():
            for gp, gc in zip(plain, ckpt):
                if gp is None and gc is None:
                    continue
                if gp is None or gc is None:
                    other = gc if gp is None else gp
                    worst = max(worst, float(other.abs().max()) if other.numel() else 0.0)
                    close = False   # a gradient lost (e.g. reentrant with no input needing grad)
                    continue
                if gp.numel() == 0:
                    continue
                d = float((gc.to(torch.float64) - gp.to(torch.float64)).abs().max())
                worst = max(worst, d if not math.isnan(d) else math.inf)
                if not torch.allclose(gc, gp, rtol=RTOL, atol=ATOL, equal_nan=True):
                    close = False
        result.update(diff=worst, close=close)
    except Exception as exc:
        result["error"] = _error_text(exc)
    finally:
        try:
            result["buffers_restored"] += saved_buffers.restore()
        except Exception:
            pass
    return result


def measure_peak(call: CheckpointCall, args, kwargs, modules, buffers, device) -> dict[str, Any]:
    """CUDA only: `torch.cuda.max_memory_allocated` above the current allocation during one
    forward of the segment that keeps its output (and so its graph), plain vs checkpointed.
    The difference is the activation memory the rest of the step no longer holds. Resets
    the device's peak statistics (the user's own `max_memory_allocated` restarts there)."""
    from torch.utils import checkpoint as cp
    result: dict[str, Any] = {"plain": None, "checkpointed": None, "saved": None, "error": None}
    saved_buffers = _Buffers(modules)
    try:
        with _quiet_rerun(args) as rng:
            peaks = []
            for checkpointed in (False, True):
                rng.reset()
                a, k, _ = _leaf_copies(args, kwargs)
                torch.cuda.synchronize(device)
                base = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
                if checkpointed:
                    reentrant = call.mode == "reentrant"
                    out = cp.checkpoint(call.fn, *a, use_reentrant=reentrant,
                                        preserve_rng_state=call.preserve_rng_state,
                                        **({} if reentrant else k))
                else:
                    out = call.fn(*a, **k)
                torch.cuda.synchronize(device)
                peaks.append(torch.cuda.max_memory_allocated(device) - base)
                del out, a, k
                saved_buffers.restore()
        result.update(plain=peaks[0], checkpointed=peaks[1], saved=peaks[0] - peaks[1])
    except Exception as exc:
        result["error"] = _error_text(exc)
    finally:
        try:
            saved_buffers.restore()
        except Exception:
            pass
    return result
