"""What the profile says beyond its rows (no torch here): whether checkpointing ran at all,
the activations no checkpoint frees, and sibling checkpoints better merged into their parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptlint.dynamic.profile.report import Report, human_bytes

LEFT_ROWS = 8   # modules listed under "saved outside any checkpoint"


def checkpointing_off(report: Report, static_sites: int) -> str | None:
    """The alarm printed first when the code checkpoints (the static pass found sites, or
    layers that checkpoint themselves ran) but no checkpoint call ran with gradients."""
    if report.checkpointed_with_grad():
        return None
    capable = {cls: n for cls, n in report.layers.items() if n.get("calls")}
    flagged = {cls: n for cls, n in capable.items() if n.get("flag_on")}
    capable = flagged or capable       # the layers that were told to checkpoint, if any
    if not static_sites and not capable:
        return None
    found = []
    if static_sites:
        found.append(f"the static pass found {static_sites} checkpoint site"
                     f"{'s' if static_sites != 1 else ''}")
    if capable:
        found.append(f"{', '.join(sorted(capable))} layers ran")
    return (f"checkpointing is not on: {' and '.join(found)}, but no checkpoint call ran with "
            f"gradients, so no activation memory was freed. Likely reason: "
            f"{_likely_reason(report, capable)}")


def _likely_reason(report: Report, capable: dict[str, dict[str, int]]) -> str:
    calls = [c for s in report.sites for c in s.calls]
    if calls:
        return (f"all {len(calls)} checkpoint calls ran with gradients off (torch.no_grad(), "
                "inference_mode() or evaluation code): a checkpoint saves nothing there")
    flagged = {cls: n for cls, n in capable.items() if n.get("flag_on")}
    if flagged:
        cls, n = next(iter(sorted(flagged.items())))
        if not n.get("grad"):
            return (f"{cls} has gradient checkpointing on, but every call ran with gradients "
                    "off (torch.no_grad() or inference_mode())")
        if not n.get("training"):
            return (f"{cls} has gradient checkpointing on, but ran in eval() mode "
                    f"(module.training is False in all {n['calls']} calls); transformers "
                    "layers checkpoint only in training: call model.train() before the "
                    "training steps")
        return (f"{cls} has gradient checkpointing on and ran in training with gradients, "
                "yet no checkpoint call ran: a newer wrapper may checkpoint in a way "
                "ckptlint does not watch")
    if capable:
        cls = sorted(capable)[0]
        return (f"the gradient_checkpointing flag is off on every {cls} that ran: it was "
                "enabled on another model object (a copy, or the model before it was "
                "wrapped or reloaded), or turned off again")
    grad_off = not report.modules
    if grad_off and report.started:
        return ("no module ran with gradients on (the run was evaluation or inference, "
                "or it stopped before a training step)")
    if not report.started:
        return "the command never imported torch"
    return ("the checkpoint calls found statically never ran: they are gated by a condition "
            "that was false in this run (`if self.training`, a config flag, "
            "`torch.is_grad_enabled()`), or the code that runs them was not called")


def left_outside(report: Report, limit: int = LEFT_ROWS) -> list[str]:
    """Modules whose own operations saved activations outside any checkpoint, most per step
    first: what checkpointing leaves in memory between forward and backward."""
    modules = sorted((m for m in report.modules.values() if m.saved),
                     key=lambda m: (-m.saved, m.root, m.module))
    if not modules:
        return []
    total = sum(m.saved for m in modules)
    lines = [f"Saved for backward outside any checkpoint: {human_bytes(total)} over the run; "
             "by module (its own operations, not its children's):"]
    for m in modules[:limit]:
        where = f"{m.module} ({m.cls}, in {m.root})" if m.module else \
            f"{m.cls} (the outermost module)"
        lines.append(f"  {where}: "
                     f"{human_bytes(m.saved_per_call)} per call x {m.calls}")
    if len(modules) > limit:
        lines.append(f"  ... and {len(modules) - limit} more modules")
    return lines


@dataclass
class ParentSuggestion:
    parent: str
    parent_class: str
    children: list[str]
    kept_by_children: int    # per call of the parent: the children's inputs, summed
    saved_in_parent: int     # per call: saved outside the checkpoints by the parent's own ops
    kept_by_parent: int      # per call: the parent's inputs (what its checkpoint would keep)
    replay_rise: int         # its replay holds all children's activations at once
    held: int = 1            # parents of this class, all held until backward

    @property
    def difference(self) -> int:
        """Bytes per call of the parent that stop being held until backward."""
        return self.kept_by_children + self.saved_in_parent - self.kept_by_parent

    def worth_it(self) -> bool:
        return self.difference > 0 and self.held * self.difference > self.replay_rise

    def text(self) -> str:
        many = f" x {self.held} {self.parent_class} modules" if self.held > 1 else ""
        return (f"{self.parent} ({self.parent_class}): its children "
                f"{', '.join(self.children)} are each checkpointed and keep "
                f"{human_bytes(self.kept_by_children)} of inputs per call, and its own "
                f"operations save {human_bytes(self.saved_in_parent)}; one checkpoint of "
                f"{self.parent} would keep only its inputs ({human_bytes(self.kept_by_parent)}): "
                f"{human_bytes(self.difference)} less held until backward per call{many}, "
                f"while its one replay holds {human_bytes(self.replay_rise)} more at once")


def parent_suggestions(report: Report) -> list[ParentSuggestion]:
    """Where two or more children of one module are checkpointed one by one (and the module
    itself is not): what checkpointing the module instead would stop holding between forward
    and backward, against what its longer replay holds at once. Listed only when the first
    outweighs the second (over all modules of the parent's class)."""
    checkpointed = {(s.root, s.module) for s in report.sites if s.module is not None}
    children: dict[tuple, list] = {}
    for s in report.sites:
        if s.module and s.parent is not None and (s.root, s.parent) not in checkpointed \
                and any(c.grad for c in s.calls):
            children.setdefault((s.root, s.parent), []).append(s)
    found = []
    for key, rows in sorted(children.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        totals = report.modules.get(key)
        if len({r.module for r in rows}) < 2 or totals is None or not totals.calls:
            continue
        kept = sum(r.input_bytes_per_call * _grad_calls(r) for r in rows) // totals.calls
        freed = [r.bytes_per_call * _grad_calls(r) // totals.calls for r in rows]
        found.append(ParentSuggestion(totals.label, totals.cls, sorted({r.module for r in rows}),
                                      kept, totals.saved_per_call, totals.inputs_per_call,
                                      sum(freed) - max(freed)))
    for suggestion in found:
        suggestion.held = sum(1 for s in found if s.parent_class == suggestion.parent_class)
    return [s for s in found if s.worth_it()]


def parent_lines(suggestions: list[ParentSuggestion]) -> list[str]:
    """One line per parent class: the first parent in full, the others named."""
    by_class: dict[str, list[ParentSuggestion]] = {}
    for suggestion in suggestions:
        by_class.setdefault(suggestion.parent_class, []).append(suggestion)
    lines = []
    for group in by_class.values():
        line = f"Checkpoint the parent instead: {group[0].text()}"
        if len(group) > 1:
            others = [s.parent for s in group[1:]]
            shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6
                                              else "")
            line += f"; the same holds for {shown}"
        lines.append(line)
    return lines


def _grad_calls(row) -> int:
    return sum(1 for c in row.calls if c.grad)


# --------------------------------------------------------------------------- policies

def suggest_policy(site, budget: int) -> dict[str, Any] | None:
    """A selective-checkpoint policy for one row, from the per-op costs of one forward: save
    the operators that cost the most recompute time per byte kept, as long as the bytes they
    keep per call stay within `budget`; never a random or collective operator, nor one whose
    output is later written in place (torch refuses to hand back a saved output that was
    mutated). A policy names operator overloads, so all calls of a chosen operator in the
    segment are saved."""
    if not site.ops:
        return None
    candidates, never = [], []
    for name, _count, nbytes, seconds, random, collective, mutated in site.ops:
        if random or collective or mutated:
            never.append(name)
        elif nbytes > 0:
            candidates.append((seconds / nbytes, name, nbytes, seconds))
    save, kept, gained = [], 0, 0.0
    for _, name, nbytes, seconds in sorted(candidates, reverse=True):
        if kept + nbytes <= budget:
            save.append(name)
            kept += nbytes
            gained += seconds
    return {"budget": budget, "save": sorted(save), "predicted_bytes_kept_per_call": kept,
            "predicted_recompute_seconds_saved": float(f"{gained:.6g}"),
            "never_saved": sorted(never), "verified": None}


def policy_code(save: list[str]) -> str:
    """Ready-to-paste Python for a suggested policy."""
    ops = ", ".join(f"torch.ops.{name}" for name in save) or ""
    return "\n".join([
        "import functools",
        "import torch",
        "from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts",
        "",
        f"SAVE = {{{ops}}}" if save else "SAVE = set()   # nothing fits the budget: recompute all",
        "",
        "def policy(ctx, op, *args, **kwargs):",
        "    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE",
        "",
        "context_fn = functools.partial(create_selective_checkpoint_contexts, policy)",
        "# checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn)",
    ])


def policy_lines(records: list[dict[str, Any]]) -> list[str]:
    """The suggested policies, one per distinct operator set, with the rows it is for and,
    after --verify, what the verifying run measured."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("suggested_policy"):
            groups.setdefault(tuple(r["suggested_policy"]["save"]), []).append(r)
    lines = []
    for save, rows in groups.items():
        first = rows[0]["suggested_policy"]
        names = ", ".join(_row_name(r) for r in rows[:4]) + \
            (f" and {len(rows) - 4} more" if len(rows) > 4 else "")
        lines.append(f"Suggested selective policy for {names} (budget "
                     f"{human_bytes(first['budget'])} per call; predicted kept "
                     f"{human_bytes(first['predicted_bytes_kept_per_call'])} per call"
                     + (f"; never saved: {', '.join(first['never_saved'])}"
                        if first["never_saved"] else "") + "):")
        lines += [f"    {line}" if line else "" for line in policy_code(list(save)).splitlines()]
        for r in rows:
            verified = r["suggested_policy"].get("verified")
            if verified:
                lines.append(f"  verified at {_row_name(r)}: {verified['text']}")
    return lines


def _row_name(record: dict[str, Any]) -> str:
    site = record["site"]
    where = f"{site['filename']}:{site['row']}"
    return f"{where} {record['module']}" if record.get("module") else where


def verification(record: dict[str, Any], measured: dict[str, Any] | None,
                 failure: str | None = None, unverifiable: str | None = None) -> dict[str, Any]:
    """What the verifying run measured for a row, next to the prediction; `failure` says how
    the verifying run failed, if it did; `unverifiable` why there was none."""
    policy = record["suggested_policy"]
    failed = f"; the verifying run failed: {failure}" if failure else ""
    if measured is None:
        return {"bytes_kept_per_call": None, "activation_bytes_freed_per_call": None,
                "grad_max_abs_diff": None, "within_budget": None,
                "text": (f"not verified: {unverifiable}" if unverifiable else
                         f"not verified: the verifying run failed: {failure}" if failure else
                         "the verifying run did not run this segment with gradients")}
    kept = measured["policy_bytes_kept_per_call"]
    diff = measured["grad_max_abs_diff"]
    agree = measured["recommendation"] != "fix" and diff is not None
    within = kept <= policy["budget"]
    text = (f"kept {human_bytes(kept)} per call (predicted "
            f"{human_bytes(policy['predicted_bytes_kept_per_call'])}, budget "
            f"{human_bytes(policy['budget'])}: {'within' if within else 'OVER'}), frees "
            f"{human_bytes(measured['activation_bytes_freed_per_call'])}, gradients "
            + (f"agree with a plain run (max diff {diff:.2g})" if agree else
               f"differ: {measured['reason']}" if diff is not None else "not compared")
            + failed)
    return {"bytes_kept_per_call": kept,
            "activation_bytes_freed_per_call": measured["activation_bytes_freed_per_call"],
            "grad_max_abs_diff": diff, "within_budget": within, "text": text}
