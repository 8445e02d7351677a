"""The lines `ckptlint dynamic` prints on stderr after every run: what was watched.

A run must never look clean because nothing was watched: the summary says how many sites,
calls and replays were seen in how many processes (and ranks), how many replays diverged,
and what could not be watched and why.
"""

from __future__ import annotations

from ckptlint.dynamic.observations import Observations, RunInfo, count
from ckptlint.dynamic.verdicts import NEVER_ATTACHED, place_text, ranks_text


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _ranks(observations: Observations) -> str:
    ranks = sorted({c.rank for c in observations.calls.values() if c.rank})
    return f" ({ranks_text(ranks)})" if ranks else ""


def summary_lines(observations: Observations, run: RunInfo) -> list[str]:
    if run.start_error:
        return []
    if not observations.attached:
        return [f"ckptlint: {NEVER_ATTACHED}"]
    attached = _plural(len(observations.booted or observations.torch_pids), "process", "processes")
    if not observations.started:
        return [f"ckptlint: the watcher attached in {attached}, but none imported torch: "
                "no checkpoint could run"]
    lines = []
    calls = list(observations.calls.values())
    if not calls:
        lines.append(f"ckptlint: the watcher attached in {attached}; no checkpoint call ran")
    else:
        sites = {(c.site_key, tuple(c.targets[:1])) for c in calls}
        pids = {c.pid for c in calls}
        replays = sum(c.replays for c in calls if c.counted)
        diverged = sum(c.diverged_count for c in calls)
        lines.append(
            f"ckptlint: watched {_plural(len(sites), 'checkpoint site')} in "
            f"{_plural(len(pids), 'process', 'processes')}{_ranks(observations)}: "
            f"{_plural(count(calls), 'call')}, {_plural(replays, 'replay')}, "
            f"{diverged} diverged")
    for mode, reason in sorted(observations.errors.items()):
        lines.append(f"ckptlint: not watched ({mode} checkpoints): {reason}")
    compiled = observations.not_watched
    if compiled:
        places = ", ".join(place_text(entry.site) for entry in compiled[:3])
        more = f" and {len(compiled) - 3} more" if len(compiled) > 3 else ""
        lines.append(f"ckptlint: not watched: {_plural(len(compiled), 'checkpoint call')} "
                     f"compiled by torch.compile (called at {places}{more}): "
                     f"{compiled[0].reason}")
    elif observations.compile_sites and not calls:
        lines.append(f"ckptlint: torch.compile was used at "
                     f"{place_text(observations.compile_sites[0])}: a checkpoint that ran only "
                     "inside compiled code may not be seen")
    return lines
