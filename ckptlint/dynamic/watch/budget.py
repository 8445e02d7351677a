"""How much the watcher writes per checkpoint site: every call at first, then summaries.

A training run can make millions of checkpoint calls. The first `RAW_CALLS` calls of each
(site, checkpointed function) in each process are written in full, one event at a time, as
they happen. Later calls are folded into a summary per (site, function, mode, flags): counts
of calls, passes, early stops, compares and divergences, line hits, passes that drew from
Python's or NumPy's random stream, devices, the first error, divergence and mismatch. Summaries are written as deltas (the counts since the last one) at
most every `FLUSH_MAX_SECONDS` (starting at `FLUSH_FIRST_SECONDS`, doubling), at interpreter
exit and when a `multiprocessing` child ends.

A folded call is held back until one of its events is notable (a pass error, a state change
the recorder reports, a replay that drew random numbers or took another way at a branch, a
compare that did not match): then it is written in full as a sample
(`"sample": true` on its call event; its counts are already in the summary) while fewer than
`SAMPLES` samples were written for its site. So a divergence after the first `RAW_CALLS` calls
is still seen with its evidence, and the file and the parent's memory stay bounded.

Not torch-specific; the recorder (recorder.py) feeds it event dicts and gives it `write`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

RAW_CALLS = 64            # calls per (site, function) and process written in full
SAMPLES = 16              # later calls per (site, function) and process written in full
HELD_EVENTS = 8           # events a folded call keeps for a possible sample
FLUSH_FIRST_SECONDS = 1.0
FLUSH_MAX_SECONDS = 10.0

# Call attributes a summary is keyed by (a summary stands for calls that share them all).
SUMMARY_KEYS = ("site", "targets", "mode", "grad", "preserve_rng_state", "inputs_require_grad",
                "enabled_at")
# Kept from the first call of a summary (one process has one rank; the module is an example).
SUMMARY_HEAD = ("params", "rank", "module", "class")


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


class Summary:
    """Counts of folded calls since the last flush (a delta), for one set of call attributes."""

    def __init__(self, call_event: dict[str, Any]):
        self.head = {key: call_event.get(key) for key in SUMMARY_KEYS}
        for key in SUMMARY_HEAD:
            self.head[key] = call_event.get(key)
        self.head["specs"] = call_event.get("specs") or []
        self.clear()

    def clear(self) -> None:
        self.calls = 0
        self.passes: dict[str, int] = {}
        self.early_stops = 0
        self.compares = 0
        self.diverged = 0
        self.lines: dict[str, dict[str, int]] = {}
        self.rng: dict[str, dict[str, int]] = {}
        self.devices: set[str] = set()
        self.errors = 0
        self.first_error: str | None = None
        self.first_divergence: dict[str, Any] | None = None
        self.first_mismatch: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return not (self.calls or self.passes or self.compares)

    def add_pass(self, event: dict[str, Any]) -> None:
        phase = event.get("phase", "forward")
        self.passes[phase] = self.passes.get(phase, 0) + 1
        self.early_stops += bool(event.get("early_stop"))
        self.devices.update(event.get("devices") or ())
        for sid, hits in (event.get("lines") or {}).items():
            per_phase = self.lines.setdefault(phase, {})
            per_phase[sid] = per_phase.get(sid, 0) + hits
        for stream in event.get("rng") or ():
            drawn = self.rng.setdefault(phase, {})
            drawn[stream] = drawn.get(stream, 0) + 1
        if event.get("error"):
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{phase}: {event['error']}"

    def add_compare(self, event: dict[str, Any]) -> None:
        self.compares += 1
        kept = {k: event.get(k) for k in ("phase", "match", "matters", "kind", "text", "at")}
        if event.get("matters"):
            self.diverged += 1
            if self.first_divergence is None:
                self.first_divergence = kept
        elif not event.get("match") and self.first_mismatch is None:
            self.first_mismatch = kept

    def event(self) -> dict[str, Any]:
        return {"ev": "summary", **self.head, "calls": self.calls, "passes": self.passes,
                "early_stops": self.early_stops, "compares": self.compares,
                "diverged": self.diverged, "lines": self.lines, "rng": self.rng,
                "devices": sorted(self.devices), "errors": self.errors,
                "first_error": self.first_error, "first_divergence": self.first_divergence,
                "first_mismatch": self.first_mismatch}


class EventBudget:
    """Per process: writes a call's events, or folds them into a summary (see the module doc).

    The recorder keeps a per-call dict (`log`) and passes it with each event of that call."""

    def __init__(self, write: Callable[[dict[str, Any]], None], raw_calls: int = RAW_CALLS,
                 samples: int = SAMPLES):
        self.write = write
        self.raw_calls = raw_calls
        self.samples_per_site = samples
        self.reset()

    def reset(self) -> None:
        """Fresh state for this process (also right after a fork: a child starts counting
        its own calls, holds none of its parent's summaries and gets a lock of its own)."""
        self.lock = threading.Lock()
        self.seen: dict[tuple, int] = {}
        self.samples: dict[tuple, int] = {}
        self.summaries: dict[tuple, Summary] = {}
        self.flush_every = FLUSH_FIRST_SECONDS
        self.next_flush = time.monotonic() + self.flush_every

    def call(self, log: dict[str, Any], event: dict[str, Any]) -> None:
        site = _frozen(event.get("site"))
        targets = _frozen(event.get("targets") or [])
        group = (site, targets[:1])
        with self.lock:
            seen = self.seen[group] = self.seen.get(group, 0) + 1
            if seen <= self.raw_calls:
                log["how"] = "raw"
                self.write(event)
                return
            key = tuple(_frozen(event.get(k)) for k in SUMMARY_KEYS)
            summary = self.summaries.get(key)
            if summary is None:
                summary = self.summaries[key] = Summary(event)
            summary.calls += 1
            log.update(how="held", held=[event], group=group, summary=summary)
            self._maybe_flush()

    def passed(self, log: dict[str, Any], event: dict[str, Any], notable: bool) -> None:
        self._follow(log, event, notable, Summary.add_pass)

    def compared(self, log: dict[str, Any], event: dict[str, Any]) -> None:
        self._follow(log, event, not event.get("match", True), Summary.add_compare)

    def _follow(self, log, event, notable: bool, fold) -> None:
        with self.lock:
            how = log.get("how")
            if how == "raw":
                self.write(event)
                return
            if how is None:
                return
            fold(log["summary"], event)
            if how == "sample":
                self.write(event)
            elif how == "held":
                group = log["group"]
                if notable and self.samples.get(group, 0) < self.samples_per_site:
                    self.samples[group] = self.samples.get(group, 0) + 1
                    held = log.pop("held")
                    held[0] = {**held[0], "sample": True}
                    for item in held + [event]:
                        self.write(item)
                    log["how"] = "sample"
                elif len(log["held"]) < HELD_EVENTS:
                    log["held"].append(event)
                else:
                    log.pop("held")
                    log["how"] = "folded"
            self._maybe_flush()

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if now >= self.next_flush:
            self._flush()
            self.flush_every = min(self.flush_every * 2, FLUSH_MAX_SECONDS)
            self.next_flush = now + self.flush_every

    def flush(self) -> None:
        """Write every summary's counts since the last flush (at exit: skipped rather than
        wait on a thread that died holding the lock)."""
        if self.lock.acquire(timeout=1.0):
            try:
                self._flush()
            finally:
                self.lock.release()

    def _flush(self) -> None:
        for summary in self.summaries.values():
            if not summary.empty:
                self.write(summary.event())
                summary.clear()
