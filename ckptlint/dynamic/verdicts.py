"""Join runtime observations with static findings and give each a verdict (no torch here).

Verdict meanings are fixed by README.md ("Dynamic mode"): confirmed, cleared, unexercised,
static-only, error. A call judges the findings of the static sites it belongs to
(`ckptlint.dynamic.join`: its own call site, or, for calls made from library code such as
checkpoint_wrapper, checkpoint_sequential and transformers layers, the site that checkpoints
its function).

A replay that diverged confirms a finding only with evidence about that finding, read from
its `data` (docs/architecture.md, "How dynamic mode judges a finding" has the table): the state it names
changed; the branch it names went the other way; the line it names ran again; the random
stream it names was drawn from again; or the replay's first difference came from its line
(or a line using what that line computed). A divergence no finding is confirmed by becomes
CKP501, and so does what the saved tensors cannot show: a replay that drew from Python's or
NumPy's random stream, or changed again state the checkpointed code writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ckptlint.dynamic import source
from ckptlint.dynamic.join import Key, SiteIndex, real
from ckptlint.dynamic.observations import (CallObs, NotWatched, Observations, RunInfo, count,
                                           unreadable)
from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from ckptlint.messages import render
from ckptlint.registry import Dynamic, codes_judged

__all__ = ["CallObs", "Observations", "RunInfo", "build_plan", "count",
           "exit_status", "judge_all"]

# How each code is judged is the registry's `dynamic` field.
STATIC_ONLY = codes_judged(Dynamic.STATIC_ONLY)
REENTRANT_CODES = codes_judged(Dynamic.REENTRANT_PATH)
SIDE_EFFECT_CODES = codes_judged(Dynamic.SIDE_EFFECT)
STATE_CODES = codes_judged(Dynamic.STATE_CHANGE, Dynamic.SIDE_EFFECT)  # findings naming state
DEVICE_CODES = codes_judged(Dynamic.DEVICE)
CONTEXT_CODES = codes_judged(Dynamic.CONTEXT_STATE)  # findings naming a context (`data.context`)
# Everything else (Dynamic.REPLAY_COMPARE) is judged by comparing forward and replay.
BRANCH_CODES = frozenset({"CKP203", "CKP204"})
# Findings whose `data.state` is a parameter of the checkpointed code (CKP402): a local of the
# pass, not state the child can read around it; their line says whether it ran twice.
ARGUMENT_CODES = frozenset({"CKP402"})
# CKP303 `data.draw` -> the global stream it draws from (Python's `random`, NumPy's).
STREAM_OF_DRAW = {"python": "python", "numpy": "numpy"}
STREAM_NAMES = {"python": "Python's `random`", "numpy": "NumPy's global random stream"}

NEVER_ATTACHED = ("the watcher never attached: no process loaded its bootstrap (`python -I`, "
                  "`python -S`, a replaced PYTHONPATH or an interpreter without `site` skip it), "
                  "so nothing was watched")


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
    """What the child should watch around each pass: per finding, the state it names, the
    side effect's line, the branch's line; per checkpointed function the static pass
    resolved, the state it writes that no finding names (spec ids "w0", "w1", ...)."""
    specs = []
    named: set[tuple[Key, str]] = set()
    for index, finding in enumerate(findings):
        spec = _finding_spec(index, finding)
        if spec is not None:
            specs.append(spec)
            for target in spec["targets"]:
                named.add((tuple(target), spec["expr"]))
    for filename, row, qualname in _resolved_functions(findings, sites):
        for expression in source.state_written(filename, row):
            if ((filename, row), expression) in named:
                continue
            named.add(((filename, row), expression))
            cls = qualname.rsplit(".", 1)[0] if "." in qualname else None
            specs.append({"id": f"w{len(specs)}", "expr": expression, "line": None,
                          "branch": None, "file": filename, "cls": cls,
                          "targets": [[filename, row]], "site": None, "written": True})
    return {"specs": specs}


def _finding_spec(index: int, finding: Finding) -> dict[str, Any] | None:
    if finding.code in CONTEXT_CODES:
        return _context_spec(index, finding)
    name = state_expression(finding) \
        if finding.code in STATE_CODES and finding.code not in ARGUMENT_CODES else None
    filename, row = hazard_place(finding)
    line = [real(filename), row] if finding.code in SIDE_EFFECT_CODES else None
    branch = [real(filename), row] if finding.code in BRANCH_CODES \
        and source.branch_arms(real(filename), row) is not None else None
    if name is None and line is None and branch is None:
        return None
    targets = []
    if finding.target is not None:
        targets.append([real(finding.target.filename), finding.target.row])
    owner = finding.data.get("owner")
    cls = owner if name is not None and name.startswith("self.") and isinstance(owner, str) \
        else None
    return {"id": index, "expr": name, "line": line, "branch": branch, "file": real(filename),
            "cls": cls, "targets": targets,
            "site": [real(finding.site.filename), finding.site.row] if finding.site else None}


def _context_spec(index: int, finding: Finding) -> dict[str, Any] | None:
    """A context's state, read around each pass (`watch/state.py`, `context_state`)."""
    context = finding.data.get("context")
    if not isinstance(context, str) or finding.site is None:
        return None
    targets = [[real(finding.target.filename), finding.target.row]] if finding.target else []
    return {"id": index, "expr": context, "context": context,
            "global": finding.data.get("state"), "line": None, "branch": None,
            "file": real(finding.filename), "cls": None, "targets": targets,
            "site": [real(finding.site.filename), finding.site.row]}


def _resolved_functions(findings: Sequence[Finding], sites: Iterable) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    targets = [t for record in sites for t in record.targets]
    targets += [f.target for f in findings if f.target is not None]
    for target in targets:
        item = (real(target.filename), target.row, target.qualname)
        if item not in out:
            out.append(item)
    return out


# --------------------------------------------------------------------------- wording

def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def place_text(key: Key | tuple | None) -> str:
    if not key:
        return "an unknown site"
    return f"{_short(key[0])}:{key[1]}"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _label(call: CallObs) -> str:
    """`Block.forward() (model.layers.3) at train.py:40 on rank 1 of 2`."""
    text = f"{call.qualname}()"
    if call.module:
        text += f" ({call.module})"
    text += f" at {place_text(call.site_key)}"
    if call.rank and call.rank[1] > 1:
        text += f" on rank {call.rank[0]} of {call.rank[1]}"
    return text


def _modules_and_ranks(calls: Iterable[CallObs]) -> str:
    """` (blocks.0, blocks.1; ranks 0, 1 of 2)`: which modules and ranks the calls ran in."""
    calls = list(calls)
    modules = sorted({c.module for c in calls if c.module})
    ranks = sorted({c.rank for c in calls if c.rank and c.rank[1] > 1})
    parts = []
    if modules:
        parts.append(", ".join(modules[:3]) + (f" and {len(modules) - 3} more"
                                                if len(modules) > 3 else ""))
    if ranks:
        parts.append(ranks_text(ranks))
    return f" ({'; '.join(parts)})" if parts else ""


def ranks_text(ranks: Sequence[tuple[int, int]]) -> str:
    """`rank 1 of 2`, `ranks 0, 1 of 2` (sorted [rank, world size] pairs)."""
    worlds = {world for _, world in ranks}
    of = f" of {worlds.pop()}" if len(worlds) == 1 else ""
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(str(r) for r, _ in ranks)}{of}"


def _phase_name(cmp: dict[str, Any]) -> str:
    return "immediate rerun (--replay-now)" if cmp.get("phase") == "replay_now" else "replay"


# --------------------------------------------------------------------------- evidence

@dataclass
class Said:
    """What one piece of evidence says about a finding: `confirms` True (it happened), False
    (it did not, or not because of this finding) or None (no bearing); `text` says why."""

    confirms: bool | None
    text: str
    again: bool = False      # state: it changed again during the replay


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
                                if isinstance(s["id"], int) and 0 <= s["id"] < len(self.findings)}
        self.written_specs = [s for s in self.plan.get("specs", []) if s.get("written")]
        # The static sites, and the site and target of every finding (a --findings run has
        # no site records): what calls are matched to.
        self.index = SiteIndex.of_records(self.sites)
        for f in self.findings:
            if f.site is not None:
                self.index.add(f.site, [f.target] if f.target is not None else [])
        self.known_sites: set[Key] = set(self.index.by_key)
        self.reached = self.index.reached(c.site for c in self.obs.calls.values())
        self._sites_of_call: dict[tuple, set[Key]] = {}
        # call key -> what the findings confirmed at that call account for: "divergence",
        # "rng:<stream>", "state:<expression>".
        self.explained: dict[tuple, set[str]] = {}

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

    def _explain(self, calls: Iterable[CallObs], *what: str) -> None:
        for call in calls:
            self.explained.setdefault(call.key, set()).update(what)

    # -- one finding
    def judge(self, finding: Finding) -> Finding:
        if finding.code in STATIC_ONLY:
            return finding.with_verdict("static-only", "this rule has no runtime check")
        if not self.obs.attached and not self.run.start_error:
            return finding.with_verdict("error", NEVER_ATTACHED)
        if finding.code == "CKP104":
            return self._enable_call(finding)
        calls, site_keys = self.matched_calls(finding)
        compiled = self._ran_compiled(finding)
        if not calls:
            if compiled is not None:
                at = f" (at {place_text(compiled.site)})" if compiled.site else ""
                return finding.with_verdict("error", f"not watched: {compiled.reason}{at}")
            crashed = self._reentrant_crash(finding)
            if crashed is not None:
                return crashed
            return self._no_calls(finding, site_keys)
        if finding.code in REENTRANT_CODES:
            return self._reentrant(finding, calls)
        return self._replay(finding, calls, site_keys)

    def _ran_compiled(self, finding: Finding) -> NotWatched | None:
        """A compiled checkpoint whose traced source holds this finding's line or site."""
        filename, row = hazard_place(finding)
        places = {(real(filename), row)}
        if finding.site is not None:
            places.add((real(finding.site.filename), finding.site.row))
        for entry in self.obs.not_watched:
            if entry.lines & places:
                return entry
        return None

    def _no_calls(self, finding: Finding, site_keys: set[Key]) -> Finding:
        if self.obs.errors:
            mode = "reentrant" if finding.code in REENTRANT_CODES else None
            reason = (self.obs.errors.get(mode) if mode else None) or \
                self.obs.errors.get("all") or next(iter(self.obs.errors.values()))
            return finding.with_verdict("error", f"not watched: {reason}")
        where = place_text(next(iter(site_keys), None))
        if self.run.start_error:
            return finding.with_verdict("unexercised", f"{self.run.describe()}; "
                                                       f"{where} never ran")
        if not self.obs.started:
            tail = f"; {self.run.describe()}" if self.run.failed else ""
            return finding.with_verdict(
                "unexercised", f"the watcher attached, but no watched process imported "
                               f"torch{tail}")
        suffix = f" ({self.run.describe()})" if self.run.failed else ""
        compiled = ""
        if self.obs.compile_sites:
            compiled = (f"; torch.compile was used at {place_text(self.obs.compile_sites[0])}, and "
                        "a checkpoint that ran only inside compiled code may not be seen")
        return finding.with_verdict(
            "unexercised", f"the checkpoint at {where} was never called{suffix}{compiled}")

    def _reentrant_crash(self, finding: Finding) -> Finding | None:
        """CKP103: reentrant checkpoint rejected the call (kwargs, context_fn, debug)."""
        if finding.code != "CKP103" or finding.site is None:
            return None
        key = (real(finding.site.filename), finding.site.row)
        error = self.run.crash_at(key)
        if error and ("Unexpected keyword arguments" in error or "only supported when "
                      "use_reentrant=False" in error or "use_reentrant=True" in error):
            return finding.with_verdict(
                "confirmed", f"the reentrant checkpoint at {place_text(key)} raised {error}")
        return None

    def _reentrant(self, finding: Finding, calls: list[CallObs]) -> Finding:
        reentrant = [c for c in calls if c.mode == "reentrant"]
        if reentrant:
            text = (f"{_label(reentrant[0])} ran in reentrant mode (CheckpointFunction) "
                    f"{_times(count(reentrant))}")
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
                "cleared", f"{_label(calls[0])} ran non-reentrant {_times(count(calls))}")
        return finding.with_verdict(
            "unexercised", f"{_label(calls[0])} ran {_times(count(calls))} in non-reentrant "
                           "mode but never replayed")

    def _enable_call(self, finding: Finding) -> Finding:
        """CKP104: the checkpoint calls of the model whose enable call at this line ran."""
        place = (real(finding.filename), finding.start.row)
        enables = [e for e in self.obs.enables if e["site"] and (real(e["site"][0]),
                                                                   e["site"][1]) == place]
        if not enables and finding.data.get("enabled_by") == "gradient_checkpointing":
            enables = [e for e in self.obs.enables if e.get("from_library")]   # Trainer
        if not enables:
            others = sorted({place_text(e["site"]) for e in self.obs.enables if e["site"]})
            text = f"the enable call at {place_text(place)} never ran"
            if others:
                text += f" (enable calls that ran: {', '.join(others)})"
            return finding.with_verdict("unexercised", text)
        sites = {tuple(e["site"][:2]) for e in enables}
        calls = [c for c in self.obs.calls.values()
                 if c.enabled_at and tuple(c.enabled_at[:2]) in sites]
        if not calls:
            return finding.with_verdict(
                "unexercised", f"the enable call at {place_text(place)} ran, but no checkpoint "
                               "call of its model followed")
        return self._reentrant(finding, calls)

    # -- replay-judged findings
    def _replay(self, finding: Finding, calls: list[CallObs], site_keys: set[Key]) -> Finding:
        compared = [c for c in calls if c.replayed]
        if finding.code in SIDE_EFFECT_CODES:
            judged = self._side_effect(finding, calls, compared)
            if judged is not None:
                return judged
        if not compared:
            return self._never_replayed(finding, calls)
        diverged = [(c, cmp) for c in compared for cmp in c.compares if cmp.get("matters")]
        n_diverged = sum(c.diverged_count for c in compared)
        n_compares = sum(c.compare_count for c in compared)
        state = self._state(finding, calls)
        draws = self._draws(finding, compared)
        if draws.confirms:
            self._explain(compared, f"rng:{STREAM_OF_DRAW[finding.data['draw']]}", "divergence")
            text = draws.text
            if diverged:
                call, cmp = diverged[0]
                text += f"; {_phase_name(cmp)} of {_label(call)} {cmp['text']}"
            return finding.with_verdict("confirmed", text)
        if finding.code in CONTEXT_CODES and state.confirms:
            self._explain(compared, f"state:{self.spec_by_finding[id(finding)]['expr']}")
            if not diverged:
                return finding.with_verdict("confirmed", f"{state.text}; the replay's saved "
                                                         "tensors matched the forward anyway")
        if not diverged:
            return self._matched(finding, compared, site_keys, n_compares, state, draws)
        call, cmp = diverged[0]
        head = f"{_phase_name(cmp)} of {_label(call)} {cmp['text']}"
        if finding.code in DEVICE_CODES and call.devices:
            head += f" (devices touched: {', '.join(sorted(call.devices))})"
        tally = f" ({n_diverged} of {n_compares} replays diverged)" \
            if n_diverged > 1 or n_compares > 1 else ""
        said = self._why(finding, compared, cmp, state)
        diverging = [c for c, _ in diverged]
        if said.confirms is False:
            return finding.with_verdict("cleared", f"{head}{tally}, but {said.text}")
        self._explain(diverging, "divergence")
        if state.confirms and state.text:
            self._explain(diverging, f"state:{self.spec_by_finding[id(finding)]['expr']}")
        text = head + (f": {said.text}" if said.text else "") + tally
        return finding.with_verdict("confirmed", text)

    def _why(self, finding: Finding, compared: list[CallObs], cmp: dict[str, Any],
             state: Said) -> Said:
        """Whether the first divergence is this finding's doing, from evidence about it."""
        branch = self._branch(finding, compared)
        if branch.confirms:
            return Said(True, f"{state.text}; {branch.text}") if state.confirms else branch
        order = self._order(finding, cmp)
        if order.confirms is False and order.text.startswith("it diverged before"):
            return order
        if state.confirms is not None:
            return state
        said = branch if branch.confirms is False else order
        if state.text:      # the state could not be compared: say so next to the other evidence
            return Said(said.confirms, "; ".join(t for t in (said.text, state.text) if t))
        return said

    def _matched(self, finding: Finding, compared: list[CallObs], site_keys: set[Key],
                 n_compares: int, state: Said, draws: Said) -> Finding:
        missing = []
        if not any(c.site_key not in self.known_sites for c in compared):
            seen = {c.site_key for c in compared}
            missing = sorted(k for k in site_keys if k not in seen)
        sites_seen = sorted({c.site_key for c in compared if c.site_key}, key=str)
        where = ", ".join(place_text(k) for k in sites_seen) or "the site"
        if missing:
            return finding.with_verdict(
                "unexercised", f"replay matched the forward {_times(n_compares)} at {where}, "
                               f"but {place_text(missing[0])} never ran a replay")
        notes = [state.text] if state.text else []
        if finding.code in DEVICE_CODES:
            devices = sorted({d for c in compared for d in c.devices})
            if devices:
                notes.append(f"devices touched: {', '.join(devices)}")
        branch = self._branch(finding, compared)
        if branch.text:
            notes.append(branch.text)
        if draws.text:
            notes.append(draws.text)
        minor = next((cmp for c in compared for cmp in c.compares if not cmp.get("match")), None)
        if minor is not None:
            notes.append(f"{minor['text']}, which feeds nothing saved")
        text = f"replay matched the forward {_times(n_compares)} at {where}{_modules_and_ranks(compared)}"
        return finding.with_verdict("cleared", "; ".join([text, *notes]))

    def _never_replayed(self, finding: Finding, calls: list[CallObs]) -> Finding:
        call = calls[0]
        forwards = sum(c.passes.get("forward", 0) for c in calls) or count(calls)
        no_grad = all(not c.grad for c in calls)
        text = (f"{_label(call)} ran forward {_times(forwards)} but never replayed ("
                + ("under no_grad" if no_grad else "no backward"))
        text += "; run with --replay-now to replay right away)" if not any(
            c.passes.get("replay_now") for c in calls) else ")"
        return finding.with_verdict("unexercised", text)

    # -- evidence about one finding
    def _state(self, finding: Finding, calls: list[CallObs]) -> Said:
        """The state the finding names: changed between the forward and the replay, or again
        during the replay (confirms); did not change (no); could not be read (no bearing)."""
        spec = self.spec_by_finding.get(id(finding))
        if spec is None or spec.get("expr") is None:
            return Said(None, "")
        sid, name = str(spec["id"]), spec["expr"]
        between = again = None
        forward_changed = None
        seen = False
        unread = None       # a summary that could not be read, where a comparison needed it
        for call in calls:
            last_forward = None
            for phase, state in call.states:
                pair = state.get(sid)
                if not pair:
                    continue
                seen = True
                if phase == "forward":
                    last_forward = pair
                    if _unread(pair):
                        unread = unread or _unread(pair)
                    elif pair[0] != pair[1] and forward_changed is None:
                        forward_changed = pair
                elif last_forward is not None:
                    crossing = (last_forward[1], pair[0])
                    if _unread(crossing):
                        unread = unread or _unread(crossing)
                    elif crossing[0] != crossing[1] and between is None:
                        between = crossing
                    if _unread(pair):
                        unread = unread or _unread(pair)
                    elif pair[0] != pair[1] and forward_changed is not None and again is None:
                        again = (forward_changed, pair)
        if not seen:
            return Said(None, "")
        if again is not None:
            (f0, f1), (r0, r1) = again
            return Said(True, f"`{name}` changed in the forward ({f0} → {f1}) and again in the "
                              f"replay ({r0} → {r1})", again=True)
        if between is not None:
            return Said(True, f"`{name}` changed between forward and backward ({between[0]} → "
                              f"{between[1]})")
        if unread is not None:
            return Said(None, f"`{name}` could not be compared: {unread}")
        if forward_changed is not None:
            return Said(False, f"`{name}` changed in the forward ({forward_changed[0]} → "
                               f"{forward_changed[1]}) but not in the replay")
        return Said(False, f"`{name}` did not change between forward and replay")

    def _branch(self, finding: Finding, compared: list[CallObs]) -> Said:
        """Which way the branch went in the forward and in the replay (line events)."""
        spec = self.spec_by_finding.get(id(finding))
        if spec is None or not spec.get("branch"):
            return Said(None, "")
        filename, row = spec["branch"]
        arms = source.branch_arms(filename, row)
        if arms is None:
            return Said(None, "")
        sid = str(spec["id"])
        same = ran = False
        for call in compared:
            forward = next((a.get(sid) for p, a in call.arms if p == "forward"), None) or []
            for phase, seen in call.arms:
                went = seen.get(sid) if phase != "forward" else None
                if not went:
                    continue
                ran = True
                for step, (before, now) in enumerate(zip(forward, went)):
                    if before != now:
                        which = f" (pass {step + 1} through it)" if step else ""
                        return Said(True, f"the `{arms.kind}` at line {row} went to line {before} "
                                          f"({_arm(arms, before)}) in the forward and to line "
                                          f"{now} ({_arm(arms, now)}) in the replay{which}")
                same = same or bool(forward)
        if same:
            return Said(False, f"the `{arms.kind}` at line {row} went the same way in the "
                               "forward and the replay")
        if not ran:
            return Said(None, f"line {row} did not run in the replay")
        return Said(None, "")

    def _draws(self, finding: Finding, compared: list[CallObs]) -> Said:
        """CKP303 on Python's or NumPy's global stream: whether the replay drew from it."""
        stream = STREAM_OF_DRAW.get(finding.data.get("draw", "")) if finding.code == "CKP303" \
            else None
        if stream is None:
            return Said(None, "")
        drew = sum(c.replays_that_drew(stream) for c in compared)
        replays = sum(c.replays for c in compared)
        name = STREAM_NAMES[stream]
        if drew:
            of = f" ({drew} of {replays} replays)" if replays > 1 else ""
            return Said(True, f"the replay of {_label(compared[0])} drew from {name} again{of}: "
                              "it gets other numbers than the forward did, and leaves the stream "
                              "further on than an uncheckpointed run")
        return Said(False, f"no replay drew from {name}")

    def _order(self, finding: Finding, cmp: dict[str, Any]) -> Said:
        """Whether the first difference came from the finding's line (or a line using what
        it computed), came before it ran, or came from elsewhere."""
        at = [(real(f), r) for f, r in cmp.get("at") or ()]
        if not at:
            return Said(None, "")
        filename, row = hazard_place(finding)
        filename = real(filename)
        rows = source.dependent_rows(filename, row)
        extra = finding.data.get("rng_at")
        if isinstance(extra, dict) and type(extra.get("row")) is int:
            rows = rows | source.dependent_rows(filename, extra["row"])
        for place in at:
            if place[0] == filename and place[1] in rows:
                line = "" if place[1] == row else f" (line {place[1]} uses what line {row} computed)"
                return Said(True, f"the first difference came from line {row}{line}")
        span = source.function_span(filename, row)
        for place in at:
            if place[0] == filename and span and span[0] <= place[1] <= span[1]:
                loop = source.loop_span(filename, row)
                if place[1] < row and not (loop and loop[0] <= place[1] <= loop[1]):
                    return Said(False, f"it diverged before line {row} (at {place_text(place)}), so "
                                       "not because of this line")
                return Said(False, f"the first difference came from {place_text(place)}, not from "
                                   f"line {row}")
        if source.escapes(filename, row):
            return Said(None, "")       # what the line computed leaves its function
        return Said(False, f"the first difference came from {place_text(at[0])}, not from line {row}")

    def _side_effect(self, finding: Finding, calls: list[CallObs],
                     compared: list[CallObs]) -> Finding | None:
        """CKP401: the line ran again in the replay, or the state changed again there."""
        line_text, line_hint = self._line_text(finding, calls)
        state = self._state(finding, calls)
        again = state.again
        expression = (self.spec_by_finding.get(id(finding)) or {}).get("expr")
        call = compared[0] if compared else calls[0]
        if line_hint == "confirmed" or (line_hint is None and again):
            if expression:
                self._explain(compared, f"state:{expression}")
            text = f"replay of {_label(call)}: {line_text or state.text}"
            if line_text and again:
                text += f"; {state.text}"
            if finding.code in ARGUMENT_CODES:
                text += (f", so the argument `{finding.data.get('state')}` was mutated in the "
                         "forward and again in the replay")
            return finding.with_verdict("confirmed", text)
        if line_hint == "cleared":
            n_compares = sum(c.compare_count for c in compared)
            text = f"{_label(call)}: {line_text}"
            if any(c.early_stops for c in compared) and "forward (" in (line_text or ""):
                text += " (early stop ended the replay before it)"
            return finding.with_verdict("cleared", f"{text}; replay compared {_times(n_compares)}")
        return None

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

    # -- CKP501
    def beyond_findings(self, enabled: bool = True) -> list[Finding]:
        """CKP501 per (site, function): what its replays did that no confirmed finding
        accounts for (a divergence, a random draw, state written again)."""
        if not enabled:
            return []
        groups: dict[tuple, list[tuple[CallObs, str]]] = {}
        for call in self.obs.calls.values():
            for text in self._unexplained(call):
                groups.setdefault((call.site, tuple(call.targets[:1])), []).append((call, text))
        out = []
        for (site, targets), found in groups.items():
            call = found[0][0]
            texts = list(dict.fromkeys(text for _, text in found))
            filename = _short(site[0]) if site else (_short(targets[0][0]) if targets else "?")
            row, column = (site[1], site[2]) if site else ((targets[0][1], 1) if targets else (1, 1))
            target = TargetRef(_short(targets[0][0]), targets[0][1], targets[0][2]) if targets else None
            data = {"function": call.qualname}
            out.append(Finding(
                code="CKP501", message=render(DIVERGENCE_MESSAGE, data),
                filename=filename, start=Position(row, column), end=Position(row, column),
                site=SiteRef(filename, row, column), chain=(), target=target, data=data,
                verdict="confirmed", evidence="; ".join(texts)))
        return out

    def _unexplained(self, call: CallObs) -> list[str]:
        explained = self.explained.get(call.key, set())
        texts = []
        cmp = next((c for c in call.compares if c.get("matters")), None)
        if cmp is not None and "divergence" not in explained:
            same = [c for c in self.obs.calls.values()
                    if (c.site, c.targets[:1]) == (call.site, call.targets[:1])]
            total = sum(c.compare_count for c in same)
            diverged = sum(c.diverged_count for c in same)
            text = f"{_phase_name(cmp)} of {_label(call)} {cmp['text']}"
            if cmp.get("at"):
                text += f" (first difference at {place_text(cmp['at'][0])})"
            if total > 1:
                text += f" ({diverged} of {total} replays diverged)"
            texts.append(text)
        for stream, name in STREAM_NAMES.items():
            if call.replays_that_drew(stream) and f"rng:{stream}" not in explained:
                texts.append(f"the replay of {_label(call)} drew from {name} again: an "
                             "uncheckpointed run draws once, so the program's numbers differ "
                             "from the next draw on")
        for spec in self.written_specs:
            changed = _changed_in_replay(call, str(spec["id"]))
            if changed and f"state:{spec['expr']}" not in explained:
                texts.append(f"the replay of {_label(call)} changed `{spec['expr']}` again "
                             f"({changed[0]} → {changed[1]}), as the forward already had")
        return texts


def _arm(arms: source.Arms, row: int) -> str:
    return {"body": "its body", "else": "its else branch",
            "past": "past it" if arms.kind == "if" else "out of the loop"}[arms.way(row)]


def _unread(pair) -> str | None:
    """The first of two state summaries that could not be read, else None."""
    return next((text for text in pair if unreadable(text)), None)


def _changed_in_replay(call: CallObs, sid: str) -> tuple[str, str] | None:
    for phase, state in call.states:
        pair = state.get(sid)
        if phase != "forward" and pair and pair[0] != pair[1] and not _unread(pair):
            return pair[0], pair[1]
    return None


# CKP501's wording (findings made here, from observations).
DIVERGENCE_MESSAGE = ("replay of `{function}` diverged from its forward and no static finding "
                      "explains it")


def judge_all(findings: Sequence[Finding], observations: Observations, sites: Iterable = (),
              run: RunInfo | None = None, plan: dict[str, Any] | None = None,
              ckp501: bool = True) -> list[Finding]:
    """Every finding with a verdict, plus CKP501 findings, sorted like static output."""
    judge = Judge(findings, observations, sites, run, plan)
    judged = [judge.judge(f) for f in findings]
    judged += judge.beyond_findings(ckp501)
    judged.sort(key=lambda f: f.sort_key)
    return judged


def exit_status(findings: Sequence[Finding], run: RunInfo,
                observations: Observations | None = None) -> int:
    """1 if anything is confirmed; else 2 if the command could not start or failed, or the
    watcher never attached in any process; else 0."""
    if any(f.verdict == "confirmed" for f in findings):
        return 1
    if run.failed:
        return 2
    if observations is not None and not observations.attached:
        return 2
    return 0
