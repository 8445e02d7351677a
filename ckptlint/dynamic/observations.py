"""What the watched processes reported, read back from the observations file (no torch here).

The watched processes append JSON lines (ckptlint/dynamic/watch/recorder.py lists the events);
`Observations.load` folds them into one record per checkpoint call recorded in full, one per
summary of calls recorded as counts, and what could not be watched. `RunInfo` is how the
command itself ended.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable

from ckptlint.dynamic.join import Key, real, target_keys

# How a state summary that could not be read in full starts (`<unreadable>`, or with the
# reason: `<unreadable list of length 9000: more than 256 values>`). Such a summary says
# nothing about a change: comparing it with another, equal or not, neither confirms nor clears.
UNREADABLE = "<unreadable"


def unreadable(summary: str) -> bool:
    return summary.startswith(UNREADABLE)


# --------------------------------------------------------------------------- observations

@dataclass
class CallObs:
    """What was seen of checkpoint calls, by `kind`:

    - "call": one call recorded in full (`calls` = 1);
    - "summary": `calls` calls of one process with the same site, function, mode and flags,
      recorded as counts (budget.py); `compares` keeps its first divergence and mismatch;
    - "sample": a call recorded in full as evidence, whose counts are in a summary (`calls` =
      0; its passes, line hits and compares count nowhere else).

    Counts: `calls`, `passes`, `early_stops`, `compare_count`, `diverged_count`, `lines`,
    `rng` (passes per phase that drew from Python's or NumPy's random stream).
    Evidence: `compares`, `states`, `arms`, `errors`, `devices`.
    Where: `pid`, `rank` ([rank, world size]), `module` and `cls` of the checkpointed module,
    `enabled_at` (the transformers enable call that covered it)."""

    key: tuple
    mode: str
    site: tuple[str, int, int] | None
    targets: list[tuple[str, int, str]]
    grad: bool = True
    preserve_rng_state: bool = True
    inputs_require_grad: bool = True
    params: int | None = None
    specs: list[int] = field(default_factory=list)
    kind: str = "call"
    calls: int = 1
    passes: dict[str, int] = field(default_factory=dict)
    early_stops: int = 0
    compares: list[dict[str, Any]] = field(default_factory=list)
    compare_count: int = 0
    diverged_count: int = 0
    states: list[tuple[str, dict[str, list]]] = field(default_factory=list)
    lines: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    arms: list[tuple[str, dict[str, list[int]]]] = field(default_factory=list)
    rng: dict[str, dict[str, int]] = field(default_factory=dict)
    pid: int = 0
    rank: tuple[int, int] | None = None
    module: str | None = None
    cls: str | None = None
    enabled_at: tuple | None = None

    @property
    def site_key(self) -> Key | None:
        return (self.site[0], self.site[1]) if self.site else None

    @property
    def counted(self) -> bool:
        return self.kind != "sample"

    @property
    def replayed(self) -> bool:
        return bool(self.compare_count or self.compares)

    def target_keys(self) -> set[Key]:
        return target_keys(self.targets)

    @property
    def qualname(self) -> str:
        return self.targets[0][2] if self.targets else "the checkpointed function"

    def add_lines(self, phase: str, hits: dict[str, int]) -> None:
        for seen_phase, seen in self.lines:
            if seen_phase == phase and self.kind == "summary":
                for sid, n in hits.items():
                    seen[sid] = seen.get(sid, 0) + n
                return
        self.lines.append((phase, dict(hits)))

    def add_draws(self, phase: str, streams: dict[str, int]) -> None:
        drawn = self.rng.setdefault(phase, {})
        for stream, n in streams.items():
            drawn[stream] = drawn.get(stream, 0) + n

    def replays_that_drew(self, stream: str) -> int:
        return sum(n.get(stream, 0) for phase, n in self.rng.items() if phase != "forward")

    @property
    def replays(self) -> int:
        return sum(n for phase, n in self.passes.items() if phase != "forward")


def count(calls: Iterable[CallObs]) -> int:
    """How many calls these records stand for."""
    return sum(c.calls for c in calls)


# Evidence kept per summary: a few error lines, one divergence, one mismatch.
SUMMARY_ERRORS = 5


@dataclass(frozen=True)
class NotWatched:
    """A checkpoint call that ran compiled: where it was called, why it was not watched, and
    the source lines its compiled graph was traced from (which findings it joins)."""

    site: tuple | None
    reason: str
    lines: frozenset[Key] = frozenset()


@dataclass
class Observations:
    calls: dict[tuple, CallObs] = field(default_factory=dict)
    not_watched: list[NotWatched] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    started: bool = False      # the watcher installed in some process (torch was imported)
    booted: set[int] = field(default_factory=set)      # pids that loaded the bootstrap
    torch_pids: set[int] = field(default_factory=set)  # pids that imported torch
    compile_sites: list[tuple | None] = field(default_factory=list)   # where torch.compile was used
    enables: list[dict[str, Any]] = field(default_factory=list)  # transformers enable calls
    # (pid, call id) -> the record its pass and compare events go to. A pid can come back
    # (a process ended and the system reused its number): a call event never replaces an
    # earlier record, it gets a key of its own and becomes the one that pid's events go to.
    current: dict[tuple[int, Any], CallObs] = field(default_factory=dict)   # (pid, call id)

    @classmethod
    def load(cls, path: str) -> Observations:
        obs = cls()
        try:
            handle = open(path, encoding="utf-8", errors="replace")
        except OSError:
            return obs
        with handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue    # a line cut by a crash
                if isinstance(event, dict):
                    obs.add(event)
        return obs

    @property
    def attached(self) -> bool:
        """Whether the watcher was loaded in any process of the run."""
        return bool(self.booted or self.started)

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("ev")
        pid = event.get("pid", 0)
        if kind == "boot":
            self.booted.add(pid)
        elif kind == "start":
            self.started = True
            self.torch_pids.add(pid)
            for mode, reason in (event.get("errors") or {}).items():
                self.errors.setdefault(mode, reason)
        elif kind == "call":
            self._add_call(pid, event)
        elif kind == "pass":
            call = self.current.get((pid, event.get("call")))
            if call is None:
                return
            phase = event.get("phase", "forward")
            if call.counted:
                call.passes[phase] = call.passes.get(phase, 0) + 1
                call.early_stops += bool(event.get("early_stop"))
                if event.get("lines"):
                    call.add_lines(phase, event["lines"])
                call.add_draws(phase, {stream: 1 for stream in event.get("rng") or ()})
            call.states.append((phase, event.get("state") or {}))
            if event.get("arms"):
                call.arms.append((phase, event["arms"]))
            call.devices.update(event.get("devices") or ())
            if event.get("error"):
                call.errors.append(f"{phase}: {event['error']}")
        elif kind == "compare":
            call = self.current.get((pid, event.get("call")))
            if call is not None:
                call.compares.append(event)
                if call.counted:
                    call.compare_count += 1
                    call.diverged_count += bool(event.get("matters"))
        elif kind == "summary":
            self._add_summary(pid, event)
        elif kind == "not_watched":
            site = event.get("site")
            lines = frozenset((real(f), int(r)) for f, r in event.get("lines") or ())
            entry = NotWatched(tuple(site) if site else None, event.get("reason", ""), lines)
            if entry not in self.not_watched:
                self.not_watched.append(entry)
        elif kind == "compile_used":
            site = tuple(event["site"]) if event.get("site") else None
            if site not in self.compile_sites:
                self.compile_sites.append(site)
        elif kind == "enable":
            self.enables.append({**event, "site": tuple(event["site"]) if event.get("site")
                                 else None})

    def _add_call(self, pid: int, event: dict[str, Any]) -> None:
        key: tuple = (pid, event["id"])
        if key in self.calls:
            key = (pid, event["id"], len(self.calls))
        site = event.get("site")
        sample = bool(event.get("sample"))
        self.calls[key] = self.current[(pid, event["id"])] = CallObs(
            key=key, mode=event.get("mode", "non-reentrant"),
            site=tuple(site) if site else None,
            targets=[tuple(t) for t in event.get("targets") or ()],
            grad=event.get("grad", True),
            preserve_rng_state=event.get("preserve_rng_state", True),
            inputs_require_grad=event.get("inputs_require_grad", True),
            params=event.get("params"), specs=list(event.get("specs") or ()),
            kind="sample" if sample else "call", calls=0 if sample else 1,
            **_where_it_ran(pid, event))

    def _add_summary(self, pid: int, event: dict[str, Any]) -> None:
        site = tuple(event["site"]) if event.get("site") else None
        targets = [tuple(t) for t in event.get("targets") or ()]
        flags = (event.get("mode", "non-reentrant"), event.get("grad", True),
                 event.get("preserve_rng_state", True), event.get("inputs_require_grad", True))
        enabled_at = tuple(event["enabled_at"]) if event.get("enabled_at") else None
        key = ("summary", pid, site, tuple(targets), *flags, enabled_at)
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = CallObs(
                key=key, mode=flags[0], site=site, targets=targets, grad=flags[1],
                preserve_rng_state=flags[2], inputs_require_grad=flags[3],
                params=event.get("params"), specs=list(event.get("specs") or ()),
                kind="summary", calls=0, **_where_it_ran(pid, event))
        call.calls += int(event.get("calls") or 0)
        for phase, n in (event.get("passes") or {}).items():
            call.passes[phase] = call.passes.get(phase, 0) + int(n)
        call.early_stops += int(event.get("early_stops") or 0)
        call.compare_count += int(event.get("compares") or 0)
        call.diverged_count += int(event.get("diverged") or 0)
        for phase, hits in (event.get("lines") or {}).items():
            call.add_lines(phase, hits)
        for phase, streams in (event.get("rng") or {}).items():
            call.add_draws(phase, streams)
        call.devices.update(event.get("devices") or ())
        if event.get("first_error") and len(call.errors) < SUMMARY_ERRORS:
            call.errors.append(event["first_error"])
        for name, wanted in (("first_divergence", True), ("first_mismatch", False)):
            kept = event.get(name)
            if kept and not any(bool(c.get("matters")) == wanted for c in call.compares):
                call.compares.append(kept)


def _where_it_ran(pid: int, event: dict[str, Any]) -> dict[str, Any]:
    rank = event.get("rank")
    return {"pid": pid, "rank": tuple(rank) if rank else None, "module": event.get("module"),
            "cls": event.get("class"),
            "enabled_at": tuple(event["enabled_at"]) if event.get("enabled_at") else None}


@dataclass
class RunInfo:
    """How the watched command ended."""

    returncode: int | None = None
    start_error: str | None = None
    timed_out: bool = False
    signal: int | None = None     # SIGTERM/SIGINT that ckptlint received and passed on
    stderr_tail: str = ""
    stderr_lines: list[str] = field(default_factory=list)

    def crash_at(self, key: Key) -> str | None:
        """The exception line of a traceback in the child's stderr that passes through `key`."""
        frame = re.compile(r'^\s*File "([^"]+)", line (\d+)')
        through = False
        for line in self.stderr_lines:
            m = frame.match(line)
            if m:
                if (real(m.group(1)), int(m.group(2))) == key:
                    through = True
                continue
            if through and re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b", line):
                return line.strip()
        return None

    @property
    def failed(self) -> bool:
        return (self.start_error is not None or self.timed_out or self.signal is not None
                or self.returncode not in (0, None))

    def report_failure(self, timeout: float | None) -> None:
        """On stderr: how the command failed, the tail of its stderr, a timeout."""
        if self.failed:
            print(f"ckptlint: {self.describe()}", file=sys.stderr)
            if self.stderr_tail:
                print("ckptlint: last lines of its stderr:\n" + self.stderr_tail,
                      file=sys.stderr)
        if timeout is not None and self.timed_out:
            print(f"ckptlint: stopped after --timeout {timeout:g} s", file=sys.stderr)

    def describe(self) -> str:
        if self.start_error:
            return f"the command could not start ({self.start_error})"
        if self.timed_out:
            return "the command was stopped at the time limit"
        if self.signal is not None:
            return f"the command was stopped: ckptlint received {signal_name(self.signal)}"
        if self.returncode not in (0, None):
            return f"the command exited with status {self.returncode}"
        return "the command finished"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
