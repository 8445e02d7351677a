"""The `profile` observer (child side): what each checkpoint call frees and costs.

Registered in the child through `run_watched(observers=["...profile_observer:observer"],
record=False)`, in place of the dynamic-mode recorder, so profiling pays for no op-by-op
dispatch mode. Per checkpoint call it writes JSON lines to
CKPTLINT_PROFILE_OUT (options in CKPTLINT_PROFILE_OPTIONS, a JSON object):

  {"ev": "start", "pid", "torch", "features", "errors", "argv"}
  {"ev": "call", "id", "pid", "mode", "site": [f, r, c] | null, "targets", "grad",
   "preserve_rng_state", "device", "module", "class", "parent", "root", "inputs"}
  {"ev": "pass", "call", "pid", "phase", "n", "seconds", "bytes", "saved", "excluded",
   "early_stop", "error", "match", "matters", "text", "timer", "kept" (forward only)}
  {"ev": "grad", "call", "pid", "diff", "close", "error", "checked"}
  {"ev": "peak", "call", "pid", "plain", "checkpointed", "saved", "error"}
  {"ev": "ops", "call", "pid", "ops": [[name, count, bytes, seconds, random, collective,
                                           mutated later]]}
  {"ev": "module", "pid", "root", "module", "class", "calls", "inputs", "saved"}  (at exit)
  {"ev": "layers", "pid", "class", "calls", "flag_on", "training", "grad"}       (at exit)
  {"ev": "policies", "pid", "wrapped"}  (--verify)
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
  segment (globals, closures, logging, I/O) happen again. --grad-check takes the gradients of
  both when the real replay starts, so the checkpointed rerun replays in the same state.
- modules (`ModuleTracker`): module paths and classes, activations saved outside any
  checkpoint, each module call's input bytes, and how self-checkpointing layers ran.
- --memory-budget: per-operator costs of one forward per (site, module) (`ops.OpCosts`);
  --verify's run applies the suggested policies (`ops.apply_policies`).
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import math
import os
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import torch

from ckptlint.dynamic.profile.tensors import storage_of, tensors_in
from ckptlint.dynamic.watch.compare import same_digest
from ckptlint.dynamic.watch.digest import digest, resolve
from ckptlint.dynamic.watch.observer import CheckpointCall, Observer, PassEnd
from ckptlint.dynamic.watch.torch_adapter import module_of

try:
    from torch.utils._python_dispatch import _disable_current_modes
except ImportError:  # pragma: no cover - older torch
    _disable_current_modes = contextlib.nullcontext

GRAD_CHECK_CALLS = 3      # calls per site that --grad-check reruns
RTOL, ATOL = 1e-5, 1e-6   # torch.allclose tolerances for --grad-check

_local = threading.local()


def _busy() -> bool:
    return getattr(_local, "busy", False)


def _replaying() -> bool:
    """A checkpoint's replay is running in this thread (its modules run a second time)."""
    return getattr(_local, "replaying", 0) > 0


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

def _activations(tensors) -> dict:
    """{storage key: nbytes} of the tensors that are not nn.Parameters (nor views of one)."""
    out = {}
    for t in tensors:
        s = storage_of(t)
        if s is not None and not isinstance(t, torch.nn.Parameter) \
                and not isinstance(getattr(t, "_base", None), torch.nn.Parameter):
            out[s[0]] = s[1]
    return out


def _activation_bytes(value) -> int:
    return sum(_activations(tensors_in(value)).values())


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


def _bound_tensors(fn) -> list:
    """Tensors a `functools.partial` binds as arguments (transformers binds a layer's keyword
    arguments, such as the rotary position embeddings, this way): inputs like the others."""
    import functools
    out: list = []
    while isinstance(fn, functools.partial):
        out += tensors_in((fn.args, fn.keywords or {}))
        fn = fn.func
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


# --------------------------------------------------------------------------- modules

# torch's checkpoint_wrapper holds the module it checkpoints under this attribute; the path
# users know is the wrapper's (torch strips the same prefix from state dicts).
WRAPPED = "_checkpoint_wrapped_module"


def _without_wrapper(path: str) -> str:
    return ".".join(part for part in path.split(".") if part != WRAPPED)


class ModuleTracker:
    """Which modules are running, through torch's global module hooks (profile only).

    It names each checkpointed module by its path from the outermost running module
    (`model.layers.3`), attributes activations saved *outside* any checkpoint to the
    innermost running module (a program-wide identity `saved_tensors_hooks`: a checkpoint's
    own hooks sit on top of it, so what it sees is exactly what no checkpoint frees), keeps
    each module call's input bytes (what a checkpoint of that module would keep), and notes
    how layers that can checkpoint themselves (transformers' `gradient_checkpointing`
    attribute) ran: in training or eval mode, with gradients on or off."""

    def __init__(self):
        self.stack: list = []   # [(module, storages saved for backward in it directly)]
        self.names: dict[int, tuple[Any, dict[int, str]]] = {}   # id(root) -> (ref, names)
        self.unnamed: set[tuple[int, int]] = set()   # (root, module) not below that root
        # (root class, module path) -> {"root", "module", "class", "calls", "inputs", "saved"}:
        # calls with gradients on, the bytes of their inputs, the bytes saved for backward
        # directly in them (outside any checkpoint)
        self.modules: dict[tuple[str, str], dict[str, Any]] = {}
        self.layers: dict[str, dict[str, Any]] = {}              # gc-capable layers, by class
        # A non-reentrant checkpoint saves its inputs through the same hooks right before
        # its forward: they are the checkpoint's own (its kept bytes), not outside saves.
        self.checkpoint_inputs: set = set()
        self._handles = []
        self._hooks = None

    def install(self) -> None:
        from torch.nn.modules import module as module_mod
        after = module_mod.register_module_forward_hook
        if "with_kwargs" in inspect.signature(after).parameters:
            leave = after(self._leave, with_kwargs=True)
        else:   # torch 2.4: the global hook is not given keyword arguments (not counted)
            leave = after(lambda module, args, output: self._leave(module, args, {}, output))
        self._handles = [module_mod.register_module_forward_pre_hook(self._enter), leave]
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda x: x)
        self._hooks.__enter__()

    # -- names
    def name_of(self, module) -> str | None:
        """Path of `module` under the outermost running module; "" for that module itself;
        None when it is not below any running module."""
        root = self.stack[0][0] if self.stack else module
        entry = self.names.get(id(root))
        stale = entry is not None and id(module) not in entry[1] \
            and (id(root), id(module)) not in self.unnamed
        if entry is None or entry[0]() is not root or stale:   # weak: models can go
            entry = self.names[id(root)] = (weakref.ref(root), {
                id(m): _without_wrapper(n) for n, m in root.named_modules()})
            if id(module) not in entry[1]:       # not a submodule: do not look again
                self.unnamed.add((id(root), id(module)))
        return entry[1].get(id(module))

    def root_class(self, module) -> str:
        """Class of the outermost running module (the model), which names the paths."""
        return type(self.stack[0][0] if self.stack else module).__name__

    def parent_of(self, module):
        """The innermost running module other than `module`."""
        for running, _ in reversed(self.stack):
            if running is not module:
                return running
        return None

    # -- hooks
    def _enter(self, module, args):
        if _busy() or _replaying():
            return
        self.stack.append((module, {}))
        flag = getattr(module, "gradient_checkpointing", None)
        if isinstance(flag, bool):
            entry = self.layers.setdefault(type(module).__name__, {
                "calls": 0, "flag_on": 0, "training": 0, "grad": 0})
            entry["calls"] += 1
            entry["flag_on"] += flag
            entry["training"] += module.training
            entry["grad"] += torch.is_grad_enabled()

    def _leave(self, module, args, kwargs, output):
        if _busy() or _replaying():
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] is module:
                packed = self.stack[i][1]
                name = self.name_of(module)
                del self.stack[i:]
                if name is not None and torch.is_grad_enabled():
                    root = self.root_class(module)
                    totals = self.modules.setdefault((root, name), {
                        "root": root, "module": name, "class": type(module).__name__,
                        "calls": 0, "inputs": 0, "saved": 0})
                    totals["calls"] += 1
                    totals["inputs"] += _activation_bytes((args, kwargs))
                    totals["saved"] += sum(packed.values())
                return

    def _pack(self, tensor):
        try:
            if self.stack and not _busy() and not _replaying() and not _is_parameter(tensor):
                s = storage_of(tensor)
                if s is not None and s[0] not in self.checkpoint_inputs:
                    self.stack[-1][1][s[0]] = s[1]
        except Exception:
            pass
        return tensor

    def events(self) -> list[dict[str, Any]]:
        out = [{"ev": "module", **totals} for totals in self.modules.values()]
        out += [{"ev": "layers", "class": cls, **entry} for cls, entry in self.layers.items()]
        return out


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
    __slots__ = ("excluded", "device", "cuda", "passes", "forward", "mode", "op_costs")

    def __init__(self, excluded: set, device: torch.device | None, mode: str):
        self.excluded = excluded
        self.device = device
        self.cuda = device is not None and device.type == "cuda"
        self.passes: dict[str, _Pass] = {}
        self.forward: list | None = None
        self.mode = mode
        self.op_costs: Any = False     # True: record per-op costs of the forward (an OpCosts)


def observer() -> "ProfileObserver":
    """The factory the child calls (`run_watched(observers=[...:observer], record=False)`);
    also writes the start event, with what the adapter could and could not hook."""
    from ckptlint.dynamic.watch import torch_adapter
    from ckptlint.dynamic.watch.recorder import start_event
    obs = ProfileObserver()
    obs.emit(start_event(dict(torch_adapter.FEATURES), dict(torch_adapter.ERRORS)))
    try:
        obs.tracker.install()
    except Exception as exc:   # older torch without global module hooks: no module paths
        obs.emit({"ev": "not_watched", "site": None,
                  "reason": f"modules not tracked ({_error_text(exc)})"})
    if obs.policies:
        from ckptlint.dynamic.profile.ops import apply_policies
        obs.emit({"ev": "policies", "wrapped": apply_policies(obs.policies)})
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
        self.op_costs = options.get("memory_budget") is not None   # per-op costs, once per key
        self.policies = dict(options.get("policies") or {})        # --verify: applied policies
        self.costed: set = set()
        self.checked: dict[Any, int] = {}
        self.peaked: set = set()
        self.pending: list = []       # (cuda event | None, callback), resolved in order
        self.lock = threading.RLock()
        self.tracker = ModuleTracker()
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
        for event in self.tracker.events():
            self.emit(event)
        self.tracker.modules.clear()
        self.tracker.layers.clear()

    # -- observer hooks
    def call_started(self, call: CheckpointCall) -> None:
        if _busy():
            return
        args = call.scratch.get("args")
        if args is None:
            args = getattr(call, "args", ()) or ()
        kwargs = call.scratch.get("kwargs") or {}
        tensors = list(tensors_in(args)) + list(tensors_in(kwargs))
        modules = _modules_of(call.fn)
        params, buffers = _params_and_buffers(modules)
        excluded = set()
        for t in (*tensors, *params, *buffers, *_bound_tensors(call.fn)):
            s = storage_of(t)
            if s is not None:
                excluded.add(s[0])
        device = next((t.device for t in tensors if t.device.type not in ("cpu", "meta")), None)
        if device is None and tensors:
            device = tensors[0].device
        state = _CallState(excluded, device, call.mode)
        call.scratch["profile"] = state
        inputs = _activations(tensors)
        self.tracker.checkpoint_inputs = set(inputs)
        module = module_of(call.fn)
        parent = self.tracker.parent_of(module) if module is not None else None
        self.emit({"ev": "call", "id": call.id, "mode": call.mode, "site": call.site,
                   "targets": call.targets, "grad": call.grad_enabled,
                   "preserve_rng_state": call.preserve_rng_state,
                   "device": str(device) if device is not None else None,
                   "module": self.tracker.name_of(module) if module is not None else None,
                   "class": type(module).__name__ if module is not None else None,
                   "parent": self.tracker.name_of(parent) if parent is not None else None,
                   "root": self.tracker.root_class(module) if module is not None else None,
                   "inputs": sum(inputs.values())})
        if not call.grad_enabled:
            return
        key = (call.site, tuple(call.targets), id(module))
        if self.grad_check and self.checked.get(key, 0) < self.grad_calls:
            self.checked[key] = self.checked.get(key, 0) + 1
            call.scratch["grad_check"] = GradCheck(call, args, kwargs, modules, params)
        if self.op_costs and key not in self.costed:
            self.costed.add(key)
            state.op_costs = True
        if self.measure_peak and state.cuda and key not in self.peaked:
            self.peaked.add(key)
            self.emit({"ev": "peak", "call": call.id,
                       **measure_peak(call, args, kwargs, modules, buffers, device)})

    def pass_started(self, call: CheckpointCall, phase: str):
        state = call.scratch.get("profile")
        if state is None or phase == "replay_now":
            return None
        if phase == "forward":
            self.tracker.checkpoint_inputs = set()
        if phase == "replay":
            check = call.scratch.pop("grad_check", None)
            if check is not None:
                self.emit({"ev": "grad", "call": call.id, **check.finish()})
            _local.replaying = getattr(_local, "replaying", 0) + 1
        record = _Pass()
        state.passes[phase] = record
        if state.cuda:
            try:
                record.start_event = torch.cuda.Event(enable_timing=True)
                record.start_event.record()
            except Exception:
                record.start_event = None
        if phase == "forward" and state.op_costs is True:
            from ckptlint.dynamic.profile.ops import OpCosts
            state.op_costs = OpCosts()
            return state.op_costs
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
            s = storage_of(tensor)
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
        if phase == "replay":
            _local.replaying -= 1
        event = {"ev": "pass", "call": call.id, "phase": phase, "n": call.passes.get(phase, 1),
                 "seconds": max(0.0, info.seconds - record.hook_seconds), "timer": "wall",
                 "bytes": sum(record.storages.values()), "saved": len(record.saved),
                 "excluded": sum(record.excluded.values()), "early_stop": info.early_stopped,
                 "error": _error_text(info.error)}
        if phase == "forward":
            event["kept"] = _policy_kept(call.scratch.get("forward_context"), state.excluded)
            if state.op_costs:
                self.emit({"ev": "ops", "call": call.id, "ops": state.op_costs.table()})
                state.op_costs = False
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


def _policy_kept(context, excluded: set) -> int:
    """Bytes of the distinct storages a selective-checkpoint policy kept in the forward (the
    op outputs it saves instead of recomputing), not counting the call's inputs, parameters
    and buffers. torch keeps them in the forward context's `storage` (op -> index -> outputs
    wrapped with their version); 0 without a policy."""
    storage = getattr(context, "storage", None)
    if not isinstance(storage, dict):
        return 0
    kept: dict = {}

    def visit(value, depth=0):
        value = getattr(value, "val", value)           # torch's _VersionWrapper
        if isinstance(value, torch.Tensor):
            s = storage_of(value)
            if s is not None and s[0] not in excluded:
                kept[s[0]] = s[1]
        elif depth < 4 and isinstance(value, (list, tuple)):
            for item in value:
                visit(item, depth + 1)
        elif depth < 4 and isinstance(value, dict):
            for item in value.values():
                visit(item, depth + 1)

    visit(storage)
    return sum(kept.values())


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
    return [t for t in tensors_in(out) if t.requires_grad and (t.is_floating_point()
                                                            or t.is_complex())]


def _upstream(outputs):
    """A fixed pseudo-random upstream gradient (its own generator: the global RNG is
    not touched), so that summed outputs cannot hide a difference by cancelling."""
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(o.shape, generator=g, dtype=torch.float32).to(o.device, o.dtype)
            for o in outputs]


class _Run:
    """One extra forward of the segment (plain or checkpointed) on fresh leaf copies of its
    inputs, kept with its graph until its gradients are taken."""

    def __init__(self, call, args, kwargs, params, checkpointed: bool):
        from torch.utils import checkpoint as cp
        a, k, leaves = _leaf_copies(args, kwargs)
        self.args = a
        self.reentrant = checkpointed and call.mode == "reentrant"
        if not checkpointed:
            out = call.fn(*a, **k)
        elif self.reentrant:
            out = cp.checkpoint(call.fn, *a, use_reentrant=True,
                                preserve_rng_state=call.preserve_rng_state)
        else:
            out = cp.checkpoint(call.fn, *a, use_reentrant=False,
                                preserve_rng_state=call.preserve_rng_state, **k)
        self.outputs = _outputs(out)
        self.params = params
        self.wrt = leaves + [p for p in params if p.requires_grad]

    def gradients(self):
        """Gradients of its inputs and parameters for a fixed upstream gradient, or None when
        nothing requires grad."""
        if not self.outputs or not self.wrt:
            return None
        grads_out = _upstream(self.outputs)
        if self.reentrant:
            # Reentrant checkpoint refuses autograd.grad(); backward() accumulates into .grad,
            # so the parameters' own .grad are set aside and put back.
            kept = [p.grad for p in self.params]
            for p in self.params:
                p.grad = None
            try:
                torch.autograd.backward(self.outputs, grads_out)
                return [t.grad for t in self.wrt]
            finally:
                for p, g in zip(self.params, kept):
                    p.grad = g
        return list(torch.autograd.grad(self.outputs, self.wrt, grads_out, allow_unused=True))


class GradCheck:
    """`--grad-check` for one call, in two halves. At the real forward: a plain run and a
    checkpointed run of the segment from the RNG state the real forward starts from (module
    state put back after each). When the real replay starts, in backward: the gradients of
    both, so the checkpointed run's replay sees the program's state at that moment, as the
    real replay does (state changed between forward and backward, by the segment's own
    code or the training loop, shows up as a difference)."""

    def __init__(self, call: CheckpointCall, args, kwargs, modules, params):
        self.modules = modules
        self.error: str | None = None
        self.plain = self.checkpointed = None
        self.restored = 0
        saved = _Buffers(modules)
        try:
            with _quiet_rerun(args) as rng:
                rng.reset()
                self.plain = _Run(call, args, kwargs, params, checkpointed=False)
                self.restored += saved.restore()
                rng.reset()
                self.checkpointed = _Run(call, args, kwargs, params, checkpointed=True)
        except Exception as exc:
            self.error = _error_text(exc)
        finally:
            self.restored += _restore_quietly(saved)

    def finish(self) -> dict[str, Any]:
        result: dict[str, Any] = {"diff": None, "close": None, "error": self.error,
                                  "checked": 0, "buffers_restored": self.restored}
        if self.error or self.plain is None or self.checkpointed is None:
            if self.plain is not None and self.checkpointed is None:   # its forward raised
                result.update(close=False, diff=math.inf,
                              error=f"checkpointed run: {self.error}")
            return result
        saved = _Buffers(self.modules)
        try:
            with _quiet_rerun(self.checkpointed.args):
                plain = self.plain.gradients()
                try:
                    ckpt = self.checkpointed.gradients()
                except Exception as exc:   # e.g. CheckpointError: the replay saved other tensors
                    result.update(close=False, diff=math.inf, checked=len(self.plain.wrt),
                                  error=f"checkpointed run: {_error_text(exc)}")
                    return result
            result["checked"] = len(self.plain.wrt)
            if plain is None or ckpt is None:
                result["error"] = "no output or input of the segment requires grad"
                return result
            result.update(_difference(plain, ckpt))
        except Exception as exc:
            result["error"] = _error_text(exc)
        finally:
            result["buffers_restored"] += _restore_quietly(saved)
            self.plain = self.checkpointed = None
        return result


def _restore_quietly(saved: "_Buffers") -> int:
    try:
        return saved.restore()
    except Exception:
        return 0


def _difference(plain, ckpt) -> dict[str, Any]:
    """{"diff": largest absolute difference, "close": torch.allclose on every pair}."""
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
    return {"diff": worst, "close": close}


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
