"""Turn the profile observer's events into one record per checkpoint site (no torch here).

Calls are matched to static sites as in dynamic mode (`ckptlint.dynamic.join`): a call at a
checkpoint site the static pass found is reported at that site (its filename as given, row
and column); a call made from library code (checkpoint_wrapper,
apply_activation_checkpointing, composable checkpoint, transformers layers) at the one static
site that checkpoints its function (`SiteKeys`); anything else at the call's own runtime
position. The JSON fields and the keep/drop/fix rule are README.md's ("Profile").
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from ckptlint.dynamic.join import SiteIndex

DROP_CODE = "CKP502"
FIX_CODE = "CKP501"
GRAD_TOLERANCE = "torch.allclose(rtol=1e-5, atol=1e-6)"


def load_events(path: str) -> list[dict[str, Any]]:
    events = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue     # a line cut by a crash
    except OSError:
        pass
    return events


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


@dataclass
class _Call:
    mode: str
    grad: bool
    preserve: bool
    device: str | None
    inputs: int = 0                     # bytes of its input tensors (what the checkpoint keeps)
    policy_kept: int = 0                # bytes a selective-checkpoint policy kept in the forward
    forward: list[float] = field(default_factory=list)
    replay: list[float] = field(default_factory=list)
    replay_bytes: int | None = None     # first replay (what the replay packs)
    forward_bytes: int | None = None    # non-reentrant forward (fallback when no replay ran)
    divergence: str | None = None
    timer: str = "wall"


@dataclass
class SiteProfile:
    site: tuple[str, int, int]
    module: str | None = None           # path of the checkpointed module ("model.layers.3")
    cls: str | None = None              # its class; None for a plain function
    parent: str | None = None           # path of the module it was called from
    root: str | None = None             # class of the outermost module (the model)
    calls: list[_Call] = field(default_factory=list)
    grads: list[dict[str, Any]] = field(default_factory=list)
    peak: int | None = None
    peak_error: str | None = None
    qualname: str | None = None
    target: str | None = None           # "file:line:qualname" of the checkpointed function
    ops: list | None = None             # per-op costs of one forward (--memory-budget)
    suggestion: dict[str, Any] | None = None   # set by the CLI (advice.suggest_policy)

    # -- the numbers README.md's profile section defines
    def measured(self) -> tuple[list[int], str]:
        """Bytes per call and where they were measured ("replay", "forward" or "")."""
        replayed = [c.replay_bytes for c in self.calls if c.replay_bytes is not None]
        if replayed:
            return replayed, "replay"
        forward = [c.forward_bytes for c in self.calls if c.forward_bytes is not None]
        return (forward, "forward") if forward else ([], "")

    @property
    def bytes_per_call(self) -> int:
        """Mean bytes freed: what the segment saves for backward, less what a selective
        policy keeps anyway (its saved op outputs stay in memory until backward)."""
        values, _ = self.measured()
        if not values:
            return 0
        return max(0, int(round(sum(values) / len(values))) - self.policy_bytes_per_call)

    @property
    def policy_bytes_per_call(self) -> int:
        return _mean([c.policy_kept for c in self.calls if c.grad])

    @property
    def input_bytes_per_call(self) -> int:
        return _mean([c.inputs for c in self.calls if c.grad])

    def saved_nothing(self) -> bool:
        """It ran with gradients and packed no tensor for backward: nothing to free, and a
        non-reentrant replay never runs."""
        values, _ = self.measured()
        return bool(values) and not any(values) and not self.policy_bytes_per_call

    @property
    def forward_seconds(self) -> float:
        return _typical([s for c in self.calls for s in c.forward])

    @property
    def recompute_seconds(self) -> float:
        return _typical([s for c in self.calls for s in c.replay])

    @property
    def replays(self) -> int:
        return sum(len(c.replay) for c in self.calls)

    @property
    def grad_diff(self) -> float | None:
        diffs = [g["diff"] for g in self.grads if g.get("diff") is not None]
        return max(diffs) if diffs else None

    def grad_failure(self) -> str | None:
        for g in self.grads:
            if g.get("close") is False:
                if g.get("error"):
                    return f"the checkpointed gradient check failed: {g['error']}"
                return (f"gradients of its inputs and parameters differ from a plain run under "
                        f"the same RNG state by up to {g['diff']:.3g} (beyond {GRAD_TOLERANCE})")
        return None

    def divergence(self) -> tuple[int, str | None]:
        bad = [c.divergence for c in self.calls if c.divergence]
        return len(bad), (bad[0] if bad else None)

    def decide(self, min_bytes: int) -> tuple[str, str | None, str]:
        n_bad, first = self.divergence()
        if n_bad:
            hint = ""
            if any(c.divergence and not c.preserve for c in self.calls):
                hint = ("; it runs with preserve_rng_state=False, so randomness in the replay "
                        "draws new numbers")
            return ("fix", FIX_CODE, f"the replay diverged from the forward in {n_bad} of "
                                     f"{self.replays} replays: {first}{hint}")
        failure = self.grad_failure()
        if failure:
            return "fix", FIX_CODE, failure
        values, where = self.measured()
        cost = human_seconds(self.recompute_seconds)
        if not values:
            return ("keep", None, "not measured: no call of this site ran with gradients, so "
                                  "it saved nothing and was never replayed")
        if self.saved_nothing():
            return ("drop", DROP_CODE, "it ran with gradients but saved no tensor for backward "
                                       "(elementwise work whose gradient needs none), so there "
                                       "is nothing to free: the checkpoint is pure overhead")
        freed = human_bytes(self.bytes_per_call)
        note = "" if where == "replay" else " (measured in the forward: no backward ran)"
        if self.bytes_per_call < min_bytes:
            return ("drop", DROP_CODE,
                    f"frees only {freed} of activations per call{note}, below "
                    f"profile-min-bytes-freed ({human_bytes(min_bytes)}), for {cost} of "
                    f"recompute")
        return "keep", None, f"frees {freed} of activations per call{note} for {cost} of recompute"

    def to_json(self, min_bytes: int) -> dict[str, Any]:
        recommendation, code, reason = self.decide(min_bytes)
        diff = self.grad_diff
        return {
            "site": {"filename": self.site[0], "row": self.site[1], "column": self.site[2]},
            "module": self.module, "class": self.cls,
            "calls": len(self.calls),
            "activation_bytes_freed_per_call": self.bytes_per_call,
            "input_bytes_kept_per_call": self.input_bytes_per_call,
            "policy_bytes_kept_per_call": self.policy_bytes_per_call,
            "forward_seconds_per_call": _round(self.forward_seconds),
            "recompute_seconds_per_call": _round(self.recompute_seconds),
            # not finite (the checkpointed run raised, or NaN): null, and the reason says why
            "grad_max_abs_diff": diff if diff is not None and math.isfinite(diff) else None,
            "peak_bytes_saved": self.peak,
            "suggested_policy": self.suggestion,
            "recommendation": recommendation, "code": code, "reason": reason,
        }


def _mean(values: list[int]) -> int:
    return int(round(sum(values) / len(values))) if values else 0


def _typical(values: list[float]) -> float:
    """Seconds per pass: the median over the passes. A mean would be dominated by the first
    call (kernel selection, lazy initialisation, allocator growth) and by the odd pass that
    the OS scheduler or a garbage collection interrupted; the median is the typical call."""
    if not values:
        return 0.0
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _round(value: float) -> float:
    return float(f"{value:.6g}")


# --------------------------------------------------------------------------- site keys

class SiteKeys:
    """Where each runtime call is reported: at the one static site it belongs to
    (`ckptlint.dynamic.join`), else, when the run cannot tell which, at its own runtime
    position rather than at a guess."""

    def __init__(self, static_sites: Iterable = ()):
        self.index = SiteIndex.of_records(static_sites)

    def key(self, site, targets, reached: frozenset = frozenset()) -> tuple[str, int, int]:
        candidates = self.index.sites_of(site, targets or (), reached)
        if len(candidates) == 1:
            return candidates[0].position
        if site:
            return (_display(site[0]), site[1], site[2])
        if targets:
            filename, first, _ = targets[0]
            return (_display(filename), first, 1)
        return ("<unknown>", 0, 0)


def _display(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


# --------------------------------------------------------------------------- aggregation

@dataclass
class ModuleTotals:
    """One module's calls with gradients on, over the whole run: the bytes of its inputs and
    of the activations saved for backward directly in it, outside any checkpoint."""
    module: str
    cls: str
    calls: int
    inputs: int
    saved: int
    root: str = ""

    @property
    def label(self) -> str:
        return self.module or f"({self.cls})"

    @property
    def saved_per_call(self) -> int:
        return int(round(self.saved / self.calls)) if self.calls else 0

    @property
    def inputs_per_call(self) -> int:
        return int(round(self.inputs / self.calls)) if self.calls else 0


@dataclass
class Report:
    sites: list[SiteProfile]
    not_watched: list[tuple[Any, str]]
    errors: dict[str, str]
    started: bool
    grad_checked: bool = False
    buffers_restored: int = 0
    modules: dict[tuple[str, str], ModuleTotals] = field(default_factory=dict)  # (root, path)
    layers: dict[str, dict[str, int]] = field(default_factory=dict)   # class -> counts

    def records(self, min_bytes: int) -> list[dict[str, Any]]:
        return [s.to_json(min_bytes) for s in self.sites]

    def checkpointed_with_grad(self) -> bool:
        return any(c.grad for s in self.sites for c in s.calls)


def build_report(events: list[dict[str, Any]], keys: SiteKeys) -> Report:
    calls: dict[tuple[int, Any], _Call] = {}                     # (pid, call id)
    site_of: dict[tuple[int, Any], tuple[Any, ...]] = {}
    sites: dict[tuple[Any, ...], SiteProfile] = {}
    modules: dict[tuple[str, str], ModuleTotals] = {}
    layers: dict[str, dict[str, int]] = {}
    not_watched: list = []
    errors: dict[str, str] = {}
    started = False
    grad_checked = False
    restored = 0
    reached = keys.index.reached(tuple(e["site"]) for e in events
                                 if e.get("ev") == "call" and e.get("site"))
    call: _Call | None
    key: tuple[Any, ...] | None
    for event in events:
        kind, pid = event.get("ev"), event.get("pid", 0)
        if kind == "start":
            started = True
            for mode, reason in (event.get("errors") or {}).items():
                errors.setdefault(mode, reason)
        elif kind == "call":
            site = event.get("site")
            position = keys.key(tuple(site) if site else None,
                                [tuple(t) for t in event.get("targets") or ()], reached)
            key = (position, event.get("root"), event.get("module"))
            profile = sites.get(key)
            if profile is None:
                profile = sites[key] = SiteProfile(position, event.get("module"),
                                                   event.get("class"), event.get("parent"),
                                                   event.get("root"))
                targets = event.get("targets") or ()
                profile.qualname = targets[0][2] if targets else None
                profile.target = ":".join(map(str, targets[0])) if targets else None
            call = _Call(event.get("mode", "non-reentrant"), bool(event.get("grad", True)),
                         bool(event.get("preserve_rng_state", True)), event.get("device"),
                         int(event.get("inputs") or 0))
            calls[(pid, event.get("id"))] = call
            site_of[(pid, event.get("id"))] = key
            profile.calls.append(call)
        elif kind == "pass":
            call = calls.get((pid, event.get("call")))
            if call is None:
                continue
            phase = event.get("phase")
            seconds = float(event.get("seconds") or 0.0)
            call.timer = event.get("timer", call.timer)
            if phase == "forward":
                call.forward.append(seconds)
                call.policy_kept = int(event.get("kept") or 0)
                if call.mode == "non-reentrant" and call.grad and not event.get("error"):
                    call.forward_bytes = int(event.get("bytes") or 0)
            elif phase == "replay":
                call.replay.append(seconds)
                if call.replay_bytes is None and not event.get("error"):
                    call.replay_bytes = int(event.get("bytes") or 0)
                if event.get("matters") and call.divergence is None:
                    call.divergence = event.get("text") or "the replay differed"
        elif kind == "grad":
            grad_checked = True
            restored += int(event.get("buffers_restored") or 0)
            key = site_of.get((pid, event.get("call")))
            if key is not None:
                sites[key].grads.append(event)
        elif kind == "peak":
            key = site_of.get((pid, event.get("call")))
            if key is not None:
                sites[key].peak = event.get("saved")
                sites[key].peak_error = event.get("error")
        elif kind == "ops":
            key = site_of.get((pid, event.get("call")))
            if key is not None and sites[key].ops is None:
                sites[key].ops = event.get("ops") or []
        elif kind == "module":
            _add_module(modules, event)
        elif kind == "layers":
            entry = layers.setdefault(str(event.get("class")), {})
            for name in ("calls", "flag_on", "training", "grad"):
                entry[name] = entry.get(name, 0) + int(event.get(name) or 0)
        elif kind == "not_watched":
            site = event.get("site")
            not_watched.append((tuple(site) if site else None, event.get("reason", "")))
    ordered = sorted(sites.values(),
                     key=lambda s: (-s.bytes_per_call, s.site[0], s.site[1], s.site[2],
                                    s.root or "", s.module or ""))
    return Report(ordered, not_watched, errors, started, grad_checked, restored, modules, layers)


def _add_module(modules: dict[tuple[str, str], ModuleTotals], event: dict[str, Any]) -> None:
    key = (str(event.get("root") or ""), str(event.get("module") or ""))
    totals = modules.get(key)
    if totals is None:
        totals = modules[key] = ModuleTotals(key[1], str(event.get("class") or ""), 0, 0, 0,
                                             key[0])
    totals.calls += int(event.get("calls") or 0)
    totals.inputs += int(event.get("inputs") or 0)
    totals.saved += int(event.get("saved") or 0)
