"""Join runtime observations with static findings and give each a verdict (no torch here).

Verdict meanings are fixed by README.md ("Dynamic mode"): confirmed, cleared, unexercised,
static-only, error. A call judges the findings of the static sites it belongs to
(`ckptlint.dynamic.join`: its own call site, or, for calls made from library code such as
checkpoint_wrapper, checkpoint_sequential and transformers layers, the site that checkpoints
its function).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ckptlint.dynamic.join import Key, SiteIndex, real, target_keys
from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from ckptlint.messages import render
from ckptlint.registry import Dynamic, codes_judged

# How each code is judged is the registry's `dynamic` field.
STATIC_ONLY = codes_judged(Dynamic.STATIC_ONLY)
REENTRANT_CODES = codes_judged(Dynamic.REENTRANT_PATH)
SIDE_EFFECT_CODES = codes_judged(Dynamic.SIDE_EFFECT)
STATE_CODES = codes_judged(Dynamic.STATE_CHANGE, Dynamic.SIDE_EFFECT)  # findings naming state
DEVICE_CODES = codes_judged(Dynamic.DEVICE)
# Everything else (Dynamic.REPLAY_COMPARE) is judged by comparing forward and replay.


# --------------------------------------------------------------------------- observations

@dataclass
class CallObs:
    """What was seen of checkpoint calls, by `kind`:

    - "call": one call recorded in full (`calls` = 1);
    - "summary": `calls` calls of one process with the same site, function, mode and flags,
      recorded as counts (budget.py); `compares` keeps its first divergence and mismatch;
    - "sample": a call recorded in full as evidence, whose counts are in a summary (`calls` =
      0; its passes, line hits and compares count nowhere else).

    Counts: `calls`, `passes`, `early_stops`, `compare_count`, `diverged_count`, `lines`.
    Evidence: `compares`, `states`, `errors`, `devices`."""

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


def count(calls: Iterable[CallObs]) -> int:
    """How many calls these records stand for."""
    return sum(c.calls for c in calls)


# Evidence kept per summary: a few error lines, one divergence, one mismatch.
SUMMARY_ERRORS = 5


@dataclass
class Observations:
    calls: dict[tuple, CallObs] = field(default_factory=dict)
    not_watched: list[tuple[Any, str]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    started: bool = False      # the watcher installed in some process (torch was imported)
    # (pid, call id) -> the record its pass and compare events go to. A pid can come back
    # (a process ended and the system reused its number): a call event never replaces an
    # earlier record, it gets a key of its own and becomes the one that pid's events go to.
    current: dict[tuple[int, int], CallObs] = field(default_factory=dict)

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

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("ev")
        pid = event.get("pid", 0)
        if kind == "start":
            self.started = True
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
            call.states.append((phase, event.get("state") or {}))
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
            entry = (tuple(site) if site else None, event.get("reason", ""))
            if entry not in self.not_watched:
                self.not_watched.append(entry)

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
            kind="sample" if sample else "call", calls=0 if sample else 1)

    def _add_summary(self, pid: int, event: dict[str, Any]) -> None:
        site = tuple(event["site"]) if event.get("site") else None
        targets = [tuple(t) for t in event.get("targets") or ()]
        flags = (event.get("mode", "non-reentrant"), event.get("grad", True),
                 event.get("preserve_rng_state", True), event.get("inputs_require_grad", True))
        key = ("summary", pid, site, tuple(targets), *flags)
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = CallObs(
                key=key, mode=flags[0], site=site, targets=targets, grad=flags[1],
                preserve_rng_state=flags[2], inputs_require_grad=flags[3],
                params=event.get("params"), specs=list(event.get("specs") or ()),
                kind="summary", calls=0)
        call.calls += int(event.get("calls") or 0)
        for phase, n in (event.get("passes") or {}).items():
            call.passes[phase] = call.passes.get(phase, 0) + int(n)
        call.early_stops += int(event.get("early_stops") or 0)
        call.compare_count += int(event.get("compares") or 0)
        call.diverged_count += int(event.get("diverged") or 0)
        for phase, hits in (event.get("lines") or {}).items():
            call.add_lines(phase, hits)
        call.devices.update(event.get("devices") or ())
        if event.get("first_error") and len(call.errors) < SUMMARY_ERRORS:
            call.errors.append(event["first_error"])
        for name, wanted in (("first_divergence", True), ("first_mismatch", False)):
            kept = event.get(name)
            if kept and not any(bool(c.get("matters")) == wanted for c in call.compares):
                call.compares.append(kept)


# --------------------------------------------------------------------------- state specs

# A name followed by attributes and constant subscripts: what the child can read.
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[(\d+|'[^']*'|\"[^\"]*\")\])*$")


def state_expression(finding: Finding) -> str | None:
    """The state a CKP201/204/401 finding is about (`data["state"]`), when the child can read
    it; None for output (print, logging), writes outside the process (`torch.save`) and for
    expressions it cannot follow."""
    state = finding.data.get("state")
    if finding.data.get("effect") in ("output", "io") or not isinstance(state, str):
        return None
    return state if _SIMPLE.match(state) else None


def hazard_place(finding: Finding) -> tuple[str, int]:
    """Where the hazard is: its own line, also for a finding reported at its site because
    the hazard's file was not linted (`data["hazard"]`)."""
    hazard = finding.data.get("hazard")
    if isinstance(hazard, dict) and isinstance(hazard.get("filename"), str) \
            and type(hazard.get("row")) is int:
        return hazard["filename"], hazard["row"]
    return finding.filename, finding.start.row


def build_plan(findings: Sequence[Finding], sites: Iterable = ()) -> dict[str, Any]:
    """What the child should read around each pass: one spec per state-naming finding."""
    specs = []
    for index, finding in enumerate(findings):
        if finding.code not in STATE_CODES:
            continue
        name = state_expression(finding)
        filename, row = hazard_place(finding)
        line = [real(filename), row] if finding.code in SIDE_EFFECT_CODES else None
        if name is None and line is None:
            continue
        targets = []
        if finding.target is not None:
            targets.append([real(finding.target.filename), finding.target.row])
        owner = finding.data.get("owner")
        cls = owner if name is not None and name.startswith("self.") and isinstance(owner, str) \
            else None
        specs.append({
            "id": index, "expr": name, "line": line, "file": real(filename), "cls": cls,
            "targets": targets,
            "site": [real(finding.site.filename), finding.site.row] if finding.site else None,
        })
    return {"specs": specs}


# --------------------------------------------------------------------------- verdicts

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


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _where(key: Key | tuple | None) -> str:
    if not key:
        return "an unknown site"
    return f"{_short(key[0])}:{key[1]}"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


class Judge:
    def __init__(self, findings: Sequence[Finding], observations: Observations,
                 sites: Iterable = (), run: RunInfo | None = None,
                 plan: dict[str, Any] | None = None):
        self.findings = list(findings)
        self.obs = observations
        self.run = run or RunInfo()
        self.sites = list(sites)
        self.plan = plan or build_plan(self.findings, self.sites)
        self.spec_by_finding = {id(self.findings[s["id"]]): s for s in self.plan.get("specs", [])
                                if 0 <= s["id"] < len(self.findings)}
        # The static sites, and the site and target of every finding (a --findings run has
        # no site records): what calls are matched to.
        self.index = SiteIndex.of_records(self.sites)
        for f in self.findings:
            if f.site is not None:
                self.index.add(f.site, [f.target] if f.target is not None else [])
        self.known_sites: set[Key] = set(self.index.by_key)
        self.reached = self.index.reached(c.site for c in self.obs.calls.values())
        self._sites_of_call: dict[tuple, set[Key]] = {}
        self.explained: set[tuple[int, int]] = set()

    # -- matching
    def sites_of(self, call: CallObs) -> set[Key]:
        """The static sites a call belongs to (ckptlint.dynamic.join)."""
        found = self._sites_of_call.get(call.key)
        if found is None:
            found = self._sites_of_call[call.key] = {
                s.key for s in self.index.sites_of(call.site, call.targets, self.reached)}
        return found

    def finding_keys(self, finding: Finding) -> set[Key]:
        """The static sites that reach a finding: its own and, for a hazard inside a
        checkpointed function, every other site that checkpoints the same function."""
        if finding.site is None:
            return set()
        own = (real(finding.site.filename), finding.site.row)
        site_keys = {own}
        if finding.chain:
            for target in self.index.by_key[own].targets:
                site_keys.update(self.index.by_target.get(target, ()))
        return site_keys

    def matched_calls(self, finding: Finding) -> tuple[list[CallObs], set[Key]]:
        site_keys = self.finding_keys(finding)
        return [c for c in self.obs.calls.values() if self.sites_of(c) & site_keys], site_keys

    # -- one finding
    def judge(self, finding: Finding) -> Finding:
        if finding.code in STATIC_ONLY:
            return finding.with_verdict("static-only", "this rule has no runtime check")
        calls, site_keys = self.matched_calls(finding)
        if not calls and finding.code == "CKP104":
            # transformers layers call checkpoint from library code: join through them.
            marker = os.sep + "transformers" + os.sep
            calls = [c for c in self.obs.calls.values()
                     if any(marker in t[0] for t in c.targets)]
        if not calls:
            crashed = self._reentrant_crash(finding)
            if crashed is not None:
                return crashed
            return self._no_calls(finding, site_keys)
        if finding.code in REENTRANT_CODES:
            return self._reentrant(finding, calls)
        for call in calls:
            self.explained.add(call.key)
        return self._replay(finding, calls, site_keys)

    def _no_calls(self, finding: Finding, site_keys: set[Key]) -> Finding:
        reasons = [reason for _, reason in self.obs.not_watched]
        if reasons:
            where = next((s for s, _ in self.obs.not_watched if s), None)
            at = f" (at {_where(where)})" if where else ""
            return finding.with_verdict("error", f"not watched: {reasons[0]}{at}")
        if self.obs.errors:
            mode = "reentrant" if finding.code in REENTRANT_CODES else None
            reason = (self.obs.errors.get(mode) if mode else None) or \
                self.obs.errors.get("all") or next(iter(self.obs.errors.values()))
            return finding.with_verdict("error", f"not watched: {reason}")
        where = _where(next(iter(site_keys), None))
        if self.run.start_error:
            return finding.with_verdict("unexercised", f"{self.run.describe()}; "
                                                       f"{where} never ran")
        if not self.obs.started:
            tail = f"; {self.run.describe()}" if self.run.failed else ""
            return finding.with_verdict(
                "unexercised", f"no watched process imported torch{tail} (`python -I`/`-S` or "
                               "a replaced PYTHONPATH would also skip the watcher)")
        suffix = f" ({self.run.describe()})" if self.run.failed else ""
        return finding.with_verdict("unexercised",
                                    f"the checkpoint at {where} was never called{suffix}")

    def _reentrant_crash(self, finding: Finding) -> Finding | None:
        """CKP103: reentrant checkpoint rejected the call (kwargs, context_fn, debug)."""
        if finding.code != "CKP103" or finding.site is None:
            return None
        key = (real(finding.site.filename), finding.site.row)
        error = self.run.crash_at(key)
        if error and ("Unexpected keyword arguments" in error or "only supported when "
                      "use_reentrant=False" in error or "use_reentrant=True" in error):
            return finding.with_verdict(
                "confirmed", f"the reentrant checkpoint at {_where(key)} raised {error}")
        return None

    def _reentrant(self, finding: Finding, calls: list[CallObs]) -> Finding:
        reentrant = [c for c in calls if c.mode == "reentrant"]
        if reentrant:
            where = _where(reentrant[0].site_key)
            text = (f"{reentrant[0].qualname}() at {where} ran in reentrant mode "
                    f"(CheckpointFunction) {_times(count(reentrant))}")
            damage = [c for c in reentrant if not c.inputs_require_grad and c.grad]
            if count(damage):
                params = damage[0].params
                what = (f"its {params} parameters got no gradient" if params else
                        "parameters used inside got no gradient")
                text += (f"; {_times(count(damage))} no input required grad, so the replay never "
                         f"ran and {what}")
            errors = [e for c in reentrant for e in c.errors]
            if errors:
                text += f"; {errors[0]}"
            return finding.with_verdict("confirmed", text)
        if any(c.replayed for c in calls):
            return finding.with_verdict(
                "cleared", f"{calls[0].qualname}() at {_where(calls[0].site_key)} ran "
                           f"non-reentrant {_times(count(calls))}")
        return finding.with_verdict(
            "unexercised", f"{calls[0].qualname}() ran {_times(count(calls))} in non-reentrant "
                           "mode but never replayed")

    def _state_text(self, finding: Finding, calls: list[CallObs]) -> tuple[str | None, bool, bool]:
        """(evidence about the named state, changed between passes, changed again in replay)."""
        spec = self.spec_by_finding.get(id(finding))
        if spec is None:
            return None, False, False
        sid, name = str(spec["id"]), spec["expr"]
        between = again = None
        forward_changed = None
        unreadable = True
        for call in calls:
            last_forward = None
            for phase, state in call.states:
                pair = state.get(sid)
                if not pair:
                    continue
                if pair[0] != "<unreadable>" or pair[1] != "<unreadable>":
                    unreadable = False
                if phase == "forward":
                    last_forward = pair
                    if pair[0] != pair[1] and forward_changed is None:
                        forward_changed = pair
                elif last_forward is not None:
                    if last_forward[1] != pair[0] and between is None:
                        between = (last_forward[1], pair[0])
                    if pair[0] != pair[1] and forward_changed is not None and again is None:
                        again = (forward_changed, pair)
        if unreadable and not any(sid in st for c in calls for _, st in c.states):
            return None, False, False
        if unreadable:
            return f"`{name}` could not be read", False, False
        if again is not None:
            (f0, f1), (r0, r1) = again
            return (f"`{name}` changed in the forward ({f0} → {f1}) and again in the replay "
                    f"({r0} → {r1})"), between is not None, True
        if between is not None:
            return (f"`{name}` changed between forward and backward ({between[0]} → "
                    f"{between[1]})"), True, False
        if forward_changed is not None:
            return (f"`{name}` changed in the forward ({forward_changed[0]} → "
                    f"{forward_changed[1]}) but not in the replay"), False, False
        return f"`{name}` did not change between forward and replay", False, False

    def _line_text(self, finding: Finding, calls: list[CallObs]) -> tuple[str | None, str | None]:
        """(evidence, "confirmed"/"cleared") from how often the finding's line ran per pass."""
        spec = self.spec_by_finding.get(id(finding))
        if spec is None or not spec.get("line"):
            return None, None
        sid = str(spec["id"])
        forward = replay = 0
        traced = replays = False
        for call in calls:
            for phase, hits in call.lines:
                if sid not in hits:
                    continue
                traced = True
                if phase == "forward":
                    forward += hits[sid]
                else:
                    replays = True
                    replay += hits[sid]
        if not traced or not replays:
            return None, None
        row = finding.start.row
        if forward and replay:
            return (f"line {row} ran in the forward and again in the replay "
                    f"({_times(forward)} and {_times(replay)})"), "confirmed"
        if forward:
            return f"line {row} ran in the forward ({_times(forward)}) but never in the replay", \
                "cleared"
        return f"line {row} did not run in any watched pass", "cleared"

    def _replay(self, finding: Finding, calls: list[CallObs], site_keys: set[Key]) -> Finding:
        compared = [c for c in calls if c.replayed]
        state_text, _, again = self._state_text(finding, calls)
        diverged = [(c, cmp) for c in compared for cmp in c.compares if cmp.get("matters")]
        n_diverged = sum(c.diverged_count for c in compared)
        n_compares = sum(c.compare_count for c in compared)
        line_text, line_hint = self._line_text(finding, calls) \
            if finding.code in SIDE_EFFECT_CODES else (None, None)
        if line_hint is not None:
            call = compared[0] if compared else calls[0]
            where = f"{call.qualname}() at {_where(call.site_key)}"
            if line_hint == "confirmed":
                text = f"replay of {where}: {line_text}"
                if again and state_text:
                    text += f"; {state_text}"
                return finding.with_verdict("confirmed", text)
            text = f"{where}: {line_text}"
            if any(c.early_stops for c in compared) and "forward (" in line_text:
                text += " (early stop ended the replay before it)"
            return finding.with_verdict("cleared", f"{text}; replay compared {_times(n_compares)}")
        if finding.code in SIDE_EFFECT_CODES and again:
            call = compared[0] if compared else calls[0]
            return finding.with_verdict(
                "confirmed", f"replay of {call.qualname}() at {_where(call.site_key)}: "
                             f"{state_text}")
        if diverged:
            call, cmp = diverged[0]
            text = f"{_phase_name(cmp)} of {call.qualname}() at {_where(call.site_key)} {cmp['text']}"
            if finding.code in DEVICE_CODES and call.devices:
                text += f" (devices touched: {', '.join(sorted(call.devices))})"
            if state_text:
                text += f": {state_text}"
            if n_diverged > 1 or n_compares > 1:
                text += f" ({n_diverged} of {n_compares} replays diverged)"
            return finding.with_verdict("confirmed", text)
        if not compared:
            call = calls[0]
            forwards = sum(c.passes.get("forward", 0) for c in calls) or count(calls)
            no_grad = all(not c.grad for c in calls)
            text = (f"{call.qualname}() at {_where(call.site_key)} ran forward "
                    f"{_times(forwards)} but never replayed ("
                    + ("under no_grad" if no_grad else "no backward"))
            text += "; run with --replay-now to replay right away)" if not any(
                c.passes.get("replay_now") for c in calls) else ")"
            return finding.with_verdict("unexercised", text)
        missing = []
        if not any(c.site_key not in self.known_sites for c in compared):
            seen = {c.site_key for c in compared}
            missing = sorted(k for k in site_keys if k not in seen)
        sites_seen = sorted({c.site_key for c in compared if c.site_key}, key=str)
        where = ", ".join(_where(k) for k in sites_seen) or "the site"
        minor = next((cmp for c in compared for cmp in c.compares if not cmp.get("match")), None)
        if finding.code in DEVICE_CODES:
            devices = sorted({d for c in compared for d in c.devices})
            if devices:
                state_text = (state_text + "; " if state_text else "") + \
                    f"devices touched: {', '.join(devices)}"
        if missing:
            return finding.with_verdict(
                "unexercised", f"replay matched the forward {_times(n_compares)} at {where}, "
                               f"but {_where(missing[0])} never ran a replay")
        text = f"replay matched the forward {_times(n_compares)} at {where}"
        if finding.code in SIDE_EFFECT_CODES and state_text:
            text = f"{text}; {state_text}"
            if any(c.early_stops for c in compared):
                text += " (early stop ended the replay before it)"
        elif state_text:
            text += f"; {state_text}"
        if minor is not None:
            text += f"; {minor['text']}, which feeds nothing saved"
        return finding.with_verdict("cleared", text)

    # -- CKP501
    def divergences_without_finding(self, enabled: bool = True) -> list[Finding]:
        if not enabled:
            return []
        groups: dict[tuple, list[CallObs]] = {}
        for call in self.obs.calls.values():
            if call.key not in self.explained and any(c.get("matters") for c in call.compares):
                groups.setdefault((call.site, tuple(call.targets[:1])), []).append(call)
        out = []
        for (site, targets), diverging in groups.items():
            call = diverging[0]
            cmp = next(c for c in call.compares if c.get("matters"))
            n_diverged = sum(c.diverged_count for c in diverging)
            total = sum(c.compare_count for c in self.obs.calls.values()
                        if (c.site, tuple(c.targets[:1])) == (site, targets))
            filename = _short(site[0]) if site else (_short(targets[0][0]) if targets else "?")
            row, column = (site[1], site[2]) if site else ((targets[0][1], 1) if targets else (1, 1))
            target = TargetRef(_short(targets[0][0]), targets[0][1], targets[0][2]) if targets else None
            evidence = f"{_phase_name(cmp)} of {call.qualname}() at {filename}:{row} {cmp['text']}"
            if total > 1:
                evidence += f" ({n_diverged} of {total} replays diverged)"
            data = {"function": call.qualname}
            out.append(Finding(
                code="CKP501", message=render(DIVERGENCE_MESSAGE, data),
                filename=filename, start=Position(row, column), end=Position(row, column),
                site=SiteRef(filename, row, column), chain=(), target=target, data=data,
                verdict="confirmed", evidence=evidence))
        return out


# CKP501's wording (findings made here, from observations).
DIVERGENCE_MESSAGE = ("replay of `{function}` diverged from its forward and no static finding "
                      "explains it")


def _phase_name(cmp: dict[str, Any]) -> str:
    return "immediate rerun (--replay-now)" if cmp.get("phase") == "replay_now" else "replay"


def judge_all(findings: Sequence[Finding], observations: Observations, sites: Iterable = (),
              run: RunInfo | None = None, plan: dict[str, Any] | None = None,
              ckp501: bool = True) -> list[Finding]:
    """Every finding with a verdict, plus CKP501 findings, sorted like static output."""
    judge = Judge(findings, observations, sites, run, plan)
    judged = [judge.judge(f) for f in findings]
    judged += judge.divergences_without_finding(ckp501)
    judged.sort(key=lambda f: f.sort_key)
    return judged


def exit_status(findings: Sequence[Finding], run: RunInfo) -> int:
    if any(f.verdict == "confirmed" for f in findings):
        return 1
    if run.failed:
        return 2
    return 0
