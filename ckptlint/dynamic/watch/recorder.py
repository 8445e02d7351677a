"""The dynamic-mode observer (child side): records each pass and streams JSON lines.

Events written (one JSON object per line, appended with a single write so that several
processes can share the file and a crash loses nothing already written):

  {"ev": "start", "pid", "torch", "features", "errors", "argv"}
  {"ev": "call", "id", "pid", "mode", "site": [f, r, c] | null, "targets": [[f, line, qualname]],
   "grad", "preserve_rng_state", "inputs_require_grad", "params": n, "specs": [spec ids],
   "sample": true (only on a call already counted in a summary)}
  {"ev": "pass", "call", "pid", "phase", "n", "ops": n_ops, "saved": n_saved, "devices",
   "early_stop", "error", "seconds", "state": {spec_id: [before, after]}}
  {"ev": "compare", "call", "pid", "phase", "match", "matters", "kind", "text"}
  {"ev": "summary", "pid", <call attributes>, "calls", "passes", ...}   (see budget.py)
  {"ev": "not_watched", "pid", "site", "reason"}   (once per site and reason in each process)

Which calls are written in full and which are summarised is budget.py's business. `pid` is
read when each event is written, never cached: a process forked from a watched one (plain
`os.fork`, `multiprocessing`, DataLoader workers) inherits this recorder, and its events must
carry its own pid. After a fork the child also starts with a fresh budget (its own call
counts, no summaries of its parent) and ignores calls its parent had begun. The file
descriptor is shared on purpose: it has no buffer, and O_APPEND writes of whole lines do not
interleave.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import sys
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ckptlint.dynamic.watch.budget import EventBudget
from ckptlint.dynamic.watch.compare import compare
from ckptlint.dynamic.watch.digest import busy, digest
from ckptlint.dynamic.watch.observer import CheckpointCall, Observer, PassEnd
from ckptlint.dynamic.watch.state import LineTracer, StateWatcher

_EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
              "empty_permuted"}
_IGNORED_OPS = {"detach", "alias", "lift_fresh", "_to_copy_noop"}


def _tensor_key(t) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)


def _storage_key(t) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


class PassRecord:
    def __init__(self, phase: str):
        self.phase = phase
        self.ops: list[list] = []
        self.saved: list[dict[str, Any]] = []
        self.devices: set[str] = set()
        self.uninit: set[int] = set()
        self.last_op: tuple[str, set, set] | None = None
        # Digests of this pass's op outputs, so a saved output is not digested twice.
        self.known: dict[tuple, list[float] | None] = {}
        # Autograd saves an op's inputs before running it: those wait for the next op.
        self.pending: list[tuple[tuple, dict[str, Any]]] = []
        self.state_before: dict[str, str] = {}

    def as_dict(self, info: PassEnd) -> dict[str, Any]:
        return {"ops": self.ops, "saved": self.saved, "early_stop": info.early_stopped,
                "error": _error_text(info.error)}


def _error_text(error) -> str | None:
    if error is None:
        return None
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:300]


class _Both:
    """Enters the op mode, then the line tracer; leaves them in reverse order."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __enter__(self):
        self.first.__enter__()
        self.second.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.second.__exit__(*exc)
        finally:
            self.first.__exit__(*exc)
        return False


class _OpMode(TorchDispatchMode):
    """Records the aten ops of one pass with a digest of their outputs."""

    def __init__(self, record: PassRecord):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(busy, "on", False):
            return out
        try:
            self._note(func, args, kwargs, out)
        except Exception:
            pass
        return out

    def _note(self, func, args, kwargs, out):
        name = func.overloadpacket.__name__
        if name in _IGNORED_OPS:
            return
        rec = self.record
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                if isinstance(t, torch.Tensor)]
        ins = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        mutating = name.endswith("_") or func._overloadname == "out" or "out" in kwargs
        if mutating:
            for t in ins:
                key = _storage_key(t)
                rec.uninit.discard(key)
        if name in _EMPTY_OPS:
            for t in outs:
                rec.uninit.add(_storage_key(t))
            rec.ops.append([name, None])
        else:
            total = None
            for t in outs:
                if _storage_key(t) in rec.uninit:
                    continue
                d = digest(t)
                rec.known[_tensor_key(t)] = d
                if d is None:
                    continue
                total = d if total is None else [total[0] + d[0], total[1] + d[1]]
            rec.ops.append([name, total])
        for t in outs:
            rec.devices.add(str(t.device))
        in_keys = {(t.data_ptr(), tuple(t.shape)) for t in ins}
        if rec.pending:
            for key, entry in rec.pending:
                if key in in_keys:
                    entry["op"], entry["role"] = name, "input"
            rec.pending = []
        rec.last_op = (name, {(t.data_ptr(), tuple(t.shape)) for t in outs}, in_keys)


def _saved_digest(record: PassRecord, tensor) -> list[float] | None:
    try:
        key = _tensor_key(tensor)
    except Exception:
        return digest(tensor)
    if key in record.known:
        return record.known[key]
    return digest(tensor)


class Recorder(Observer):
    def __init__(self, path: str, plan: dict[str, Any] | None = None):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.state = StateWatcher((plan or {}).get("specs", []))
        self.budget = EventBudget(self.emit)
        self.not_watched_seen: set = set()
        atexit.register(self.budget.flush)
        os.register_at_fork(after_in_child=_weak_call(self, Recorder._forked))
        # A multiprocessing child ends with os._exit (no atexit): flush from its finalizers.
        multiprocessing.util.register_after_fork(self, Recorder._in_multiprocessing_child)

    def emit(self, event: dict[str, Any]) -> None:
        event["pid"] = os.getpid()
        line = json.dumps(event, default=str) + "\n"
        os.write(self.fd, line.encode("utf-8", "replace"))

    def _forked(self) -> None:
        self.budget.reset()
        self.not_watched_seen = set()

    def _in_multiprocessing_child(self) -> None:
        multiprocessing.util.Finalize(self, self.budget.flush, exitpriority=0)

    @staticmethod
    def _log(call: CheckpointCall) -> dict[str, Any] | None:
        """The budget's per-call state, if this process began the call."""
        log = call.scratch.get("log")
        return log if log is not None and log["pid"] == os.getpid() else None

    # -- observer hooks
    def call_started(self, call: CheckpointCall) -> None:
        specs = self.state.specs_for(call)
        call.scratch["specs"] = specs
        call.scratch["log"] = log = {"pid": os.getpid()}
        module = None
        try:
            from ckptlint.dynamic.watch.torch_adapter import module_of
            module = module_of(call.fn)
        except Exception:
            pass
        params = sum(1 for p in module.parameters() if p.requires_grad) if module is not None else None
        self.budget.call(log, {
            "ev": "call", "id": call.id, "mode": call.mode, "site": call.site,
            "targets": call.targets, "grad": call.grad_enabled,
            "preserve_rng_state": call.preserve_rng_state,
            "inputs_require_grad": call.inputs_require_grad, "params": params,
            "specs": [s["id"] for s in specs]})

    def pass_started(self, call: CheckpointCall, phase: str):
        if self._log(call) is None:
            return None
        record = PassRecord(phase)
        record.state_before = self.state.snapshot(call, call.scratch.get("specs", ()))
        call.scratch["rec:" + phase] = record
        specs = call.scratch.get("specs", ())
        if any(spec.get("_line") for spec in specs):
            record.tracer = LineTracer(specs)
            return _Both(_OpMode(record), record.tracer)
        return _OpMode(record)

    def tensor_saved(self, call: CheckpointCall, phase: str, index: int, tensor) -> None:
        record = call.scratch.get("rec:" + phase)
        if record is None:
            return
        op, role = "", ""
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if record.last_op is not None and key in record.last_op[1]:
            op, role = record.last_op[0], "output"
        skip = _storage_key(tensor) in record.uninit
        entry = {
            "i": index, "op": op, "role": role, "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).replace("torch.", ""), "device": str(tensor.device),
            "d": None if skip else _saved_digest(record, tensor),
        }
        record.saved.append(entry)
        if not op:
            record.pending.append((key, entry))

    def pass_ended(self, call: CheckpointCall, phase: str, info: PassEnd) -> None:
        record = call.scratch.pop("rec:" + phase, None)
        log = self._log(call)
        if record is None or log is None:
            return
        after = self.state.snapshot(call, call.scratch.get("specs", ()))
        state = {k: [record.state_before.get(k), after.get(k)] for k in set(after) | set(record.state_before)}
        data = record.as_dict(info)
        tracer = getattr(record, "tracer", None)
        lines = dict(tracer.hits) if tracer is not None and tracer.hits else None
        after_forward = call.scratch.get("state_after_forward") if phase != "forward" else None
        if phase == "forward":
            call.scratch["state_after_forward"] = after
        self.budget.passed(log, {
            "ev": "pass", "call": call.id, "phase": phase, "n": call.passes.get(phase, 1),
            "ops": len(record.ops), "saved": len(record.saved),
            "devices": sorted(record.devices), "early_stop": info.early_stopped,
            "error": data["error"], "seconds": round(info.seconds, 6), "state": state,
            "lines": lines}, notable=data["error"] is not None or _state_moved(state, after_forward))
        if phase == "forward":
            call.scratch["forward"] = data
        else:
            forward = call.scratch.get("forward")
            if forward is None:
                return
            result = compare(forward, data)
            self.budget.compared(log, {"ev": "compare", "call": call.id, "phase": phase,
                                       **result})

    def not_watched(self, site, reason: str) -> None:
        key = (tuple(site) if site else None, reason)
        if key not in self.not_watched_seen:
            self.not_watched_seen.add(key)
            self.emit({"ev": "not_watched", "site": site, "reason": reason})


def _state_moved(state: dict[str, list], after_forward: dict[str, str] | None) -> bool:
    """Whether the watched state changed during this pass, or (for a replay) between the end
    of the forward and the start of this pass."""
    if any(before != after for before, after in state.values()):
        return True
    return bool(after_forward) and any(after_forward[k] != pair[0] for k, pair in state.items()
                                       if k in after_forward)


def _weak_call(obj, method):
    """A callable that runs `method(obj)` while `obj` lives (os.register_at_fork keeps its
    callables for the life of the process)."""
    ref = weakref.ref(obj)

    def call() -> None:
        target = ref()
        if target is not None:
            method(target)
    return call


def start_event(features, errors) -> dict[str, Any]:
    return {"ev": "start", "torch": torch.__version__, "features": features, "errors": errors,
            "argv": list(sys.argv)}
