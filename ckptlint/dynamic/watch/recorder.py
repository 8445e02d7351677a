"""The dynamic-mode observer (child side): records each pass and streams JSON lines.

Events written (one JSON object per line, appended with a single write so that several
processes can share the file and a crash loses nothing already written):

  {"ev": "boot", "pid"}          (written by the bootstrap when a process loads it)
  {"ev": "start", "pid", "torch", "features", "errors", "argv"}
  {"ev": "call", "id", "pid", "mode", "site": [f, r, c] | null, "targets": [[f, line, qualname]],
   "grad", "preserve_rng_state", "inputs_require_grad", "params": n, "specs": [spec ids],
   "rank": [rank, world] | null, "module": "model.layers.3" | null, "class": "Block" | null,
   "enabled_at": [f, r, c] | null (the transformers enable call that covered the module),
   "sample": true (only on a call already counted in a summary)}
  {"ev": "pass", "call", "pid", "phase", "n", "ops": n_ops, "saved": n_saved, "devices",
   "early_stop", "error", "seconds", "state": {spec_id: [before, after]},
   "lines": {spec_id: hits}, "arms": {spec_id: [rows]}, "rng": [streams drawn from],
   "policy_saved": n (ops a selective-checkpoint policy kept, which the replay does not run)}
  {"ev": "compare", "call", "pid", "phase", "match", "matters", "kind", "text",
   "at": [[f, r], ...] (the lines the first difference came from, innermost first)}
  {"ev": "summary", "pid", <call attributes>, "calls", "passes", ...}   (see budget.py)
  {"ev": "not_watched", "pid", "site", "reason", "lines": [[f, r], ...]}   (once per site and
   reason in each process; lines: the source lines a compiled checkpoint was traced from)
  {"ev": "compile_used", "pid", "site"}
  {"ev": "enable", "pid", "api", "site", "from_library", "model"}   (see hf.py)

What a pass compares is the segment's own computation: ops a selective-checkpoint policy
saved in the forward are left out of the forward's list (the replay takes them from the cache
instead of running them), and so are ops a torch.distributed hook issued around a module's
forward (FSDP2's unshard; see frames.py) and profiler markers.

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

from ckptlint.dynamic.watch import frames, hf, placement, rng
from ckptlint.dynamic.watch.budget import EventBudget
from ckptlint.dynamic.watch.compare import compare, same_digest
from ckptlint.dynamic.watch.digest import busy, digest
from ckptlint.dynamic.watch.observer import CheckpointCall, Observer, PassEnd
from ckptlint.dynamic.watch.state import LineTracer, StateWatcher

_EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
              "empty_permuted"}
# Not computation: views for autograd's bookkeeping, profiler markers.
_IGNORED_OPS = {"detach", "alias", "lift_fresh", "_to_copy_noop", "_record_function_enter",
                "_record_function_enter_new", "_record_function_exit"}


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
        self.rng_before: dict[str, int] = {}
        # Forward only: indices of ops a selective-checkpoint policy saved.
        self.policy_saved: set[int] = set()
        # Forward only: (op name, index) the policy saved before the op ran and was recorded.
        self.policy_saves_next: tuple[str, int] | None = None
        # Replay only: the forward's ops, and where the first op that differs from them ran.
        self.reference: list[list] | None = None
        self.first_difference: list[list] | None = None
        self.skip_framework_hooks = False
        self.tracer: LineTracer | None = None
        # Forward only: (the selective-checkpoint mode, its own policy) while it is wrapped.
        self.policy_context: tuple[Any, Any] | None = None

    def ops_compared(self) -> list[list]:
        """The ops a replay runs again: all but those a selective-checkpoint policy saved."""
        if not self.policy_saved:
            return self.ops
        return [op for index, op in enumerate(self.ops) if index not in self.policy_saved]

    def as_dict(self, info: PassEnd) -> dict[str, Any]:
        return {"ops": self.ops_compared(), "saved": self.saved,
                "early_stop": info.early_stopped, "error": _error_text(info.error)}

    def note_policy_saved(self, func, op_ran: bool) -> None:
        """The policy saved the output of `func`: the op just run (the last one recorded) if
        it ran before the policy was asked, otherwise the next op to be recorded."""
        name = func.overloadpacket.__name__
        if not op_ran:
            self.policy_saves_next = (name, len(self.ops))
        elif self.ops and self.ops[-1][0] == name:
            self.policy_saved.add(len(self.ops) - 1)

    def op_recorded(self) -> None:
        """After an op is appended: mark it if the policy, asked before it ran, saved it."""
        expected, self.policy_saves_next = self.policy_saves_next, None
        if expected is not None and expected == (self.ops[-1][0], len(self.ops) - 1):
            self.policy_saved.add(len(self.ops) - 1)

    def check_against_forward(self) -> None:
        """After an op of a replay: at the first op that is not the forward's, note the lines
        it came from (once per pass; a mismatch found only in saved tensors has none)."""
        if self.reference is None or self.first_difference is not None:
            return
        index = len(self.ops) - 1
        if index >= len(self.reference):
            return
        mine, theirs = self.ops[index], self.reference[index]
        if mine[0] != theirs[0] or not same_digest(mine[1], theirs[1]):
            self.first_difference = frames.source_lines(sys._getframe(3))


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
        tracer = self.record.tracer
        paused = tracer is not None and tracer.pause()
        try:
            out = func(*args, **kwargs)
            if not getattr(busy, "on", False):
                try:
                    self._note(func, args, kwargs, out)
                except Exception:
                    pass
            return out
        finally:
            if paused:
                tracer.resume()

    def _note(self, func, args, kwargs, out):
        name = func.overloadpacket.__name__
        if name in _IGNORED_OPS:
            return
        rec = self.record
        if rec.skip_framework_hooks and frames.in_framework_hook(sys._getframe(2)):
            return
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
        rec.op_recorded()
        for t in outs:
            rec.devices.add(str(t.device))
        in_keys = {(t.data_ptr(), tuple(t.shape)) for t in ins}
        if rec.pending:
            for key, entry in rec.pending:
                if key in in_keys:
                    entry["op"], entry["role"] = name, "input"
            rec.pending = []
        rec.last_op = (name, {(t.data_ptr(), tuple(t.shape)) for t in outs}, in_keys)
        rec.check_against_forward()


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
        hf.install(self.emit)
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
            "specs": [s["id"] for s in specs], "rank": placement.rank(),
            "module": placement.module_name(module),
            "class": type(module).__name__ if module is not None else None,
            "enabled_at": hf.enabled_at(module) if module is not None else None})

    def pass_started(self, call: CheckpointCall, phase: str):
        if self._log(call) is None:
            return None
        record = PassRecord(phase)
        specs = call.scratch.get("specs", ())
        record.state_before = self.state.snapshot(call, specs)
        record.rng_before = rng.fingerprints()
        record.skip_framework_hooks = frames.framework_hooks_possible()
        if phase == "forward":
            _watch_policy(record, call.scratch.pop("forward_context", None))
        else:
            forward = call.scratch.get("forward")
            record.reference = forward["ops"] if forward is not None else None
        call.scratch["rec:" + phase] = record
        tracer = LineTracer(specs) if specs else None
        if tracer is not None and tracer.wanted:
            record.tracer = tracer
            return _Both(_OpMode(record), tracer)
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
        _restore_policy(record)
        after = self.state.snapshot(call, call.scratch.get("specs", ()))
        state = {k: [record.state_before.get(k), after.get(k)] for k in set(after) | set(record.state_before)}
        drawn = rng.drawn(record.rng_before, rng.fingerprints())
        data = record.as_dict(info)
        tracer = record.tracer
        lines = dict(tracer.hits) if tracer is not None and tracer.hits else None
        arms = dict(tracer.arms) if tracer is not None and tracer.arms else None
        after_forward = call.scratch.get("state_after_forward") if phase != "forward" else None
        if phase == "forward":
            call.scratch["state_after_forward"] = after
            call.scratch["arms"] = arms
        turned = phase != "forward" and _took_another_way(call.scratch.get("arms"), arms)
        self.budget.passed(log, {
            "ev": "pass", "call": call.id, "phase": phase, "n": call.passes.get(phase, 1),
            "ops": len(record.ops), "saved": len(record.saved),
            "devices": sorted(record.devices), "early_stop": info.early_stopped,
            "error": data["error"], "seconds": round(info.seconds, 6), "state": state,
            "lines": lines, "arms": arms, "rng": drawn or None,
            "policy_saved": len(record.policy_saved) or None},
            notable=data["error"] is not None or _state_moved(state, after_forward)
            or bool(drawn and phase != "forward") or turned)
        if phase == "forward":
            call.scratch["forward"] = data
        else:
            forward = call.scratch.get("forward")
            if forward is None:
                return
            result = compare(forward, data)
            if not result["match"]:
                at = frames.traceback_lines(info.error) if result["kind"] == "error" \
                    else record.first_difference
                if at:
                    result["at"] = at
            self.budget.compared(log, {"ev": "compare", "call": call.id, "phase": phase,
                                       **result})

    def not_watched(self, site, reason: str, lines=()) -> None:
        key = (tuple(site) if site else None, reason)
        if key not in self.not_watched_seen:
            self.not_watched_seen.add(key)
            self.emit({"ev": "not_watched", "site": site, "reason": reason,
                       "lines": [list(line) for line in lines]})

    def compile_used(self, site) -> None:
        key = (tuple(site) if site else None, "compile")
        if key not in self.not_watched_seen:
            self.not_watched_seen.add(key)
            self.emit({"ev": "compile_used", "site": site})


def _took_another_way(forward: dict[str, list] | None, replay: dict[str, list] | None) -> bool:
    """Whether a branch line went elsewhere in the replay than in the forward (as far as
    both ran it: an early-stopped replay runs a prefix)."""
    for spec_id, went in (replay or {}).items():
        before = (forward or {}).get(spec_id) or []
        if any(a != b for a, b in zip(before, went)):
            return True
    return False


def _policy_saves(decision) -> bool:
    from torch.utils import checkpoint as cp
    policy = getattr(cp, "CheckpointPolicy", None)
    if isinstance(decision, bool):
        return decision
    return policy is not None and decision in (policy.MUST_SAVE, policy.PREFER_SAVE)


def _watch_policy(record: PassRecord, context) -> None:
    """Selective checkpointing (`context_fn=partial(create_selective_checkpoint_contexts,
    policy)`): the forward's context is a dispatch mode asking `policy_fn` about each op.
    Wrapped for this forward, each answer to save an op marks that op; the replay takes it
    from the cache instead of running it again. Which op is marked depends on when torch
    asks: a policy context carrying the op's output (`op_output`) is asked after the op ran
    (the last one recorded); one without it is asked before (the next one recorded)."""
    policy = getattr(context, "policy_fn", None)
    if not isinstance(context, TorchDispatchMode) or not callable(policy):
        return

    def noting(ctx, func, *args, **kwargs):
        decision = policy(ctx, func, *args, **kwargs)
        try:
            if _policy_saves(decision):
                record.note_policy_saved(func, op_ran=hasattr(ctx, "op_output"))
        except Exception:
            pass
        return decision

    try:
        context.policy_fn = noting
        record.policy_context = (context, policy)
    except Exception:
        pass


def _restore_policy(record: PassRecord) -> None:
    kept = record.policy_context
    if kept is not None:
        context, policy = kept
        try:
            context.policy_fn = policy
        except Exception:
            pass


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
