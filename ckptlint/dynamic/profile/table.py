"""Text table and bar chart for `ckptlint profile` (records as in README.md's profile JSON)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Sequence

from ckptlint.dynamic.profile.report import human_bytes, human_seconds

COLUMNS = ("site", "module", "calls", "freed/call", "kept/call", "forward/call",
           "recompute/call", "grad diff", "peak saved", "call")
CLASS_COLUMNS = ("class", "modules", "calls", "freed/call", "freed in all", "recompute in all",
                 "call")

PLOT_INSTALL = ("--plot needs matplotlib, which is not installed for {python}; install it "
                "with `{python} -m pip install matplotlib` (it is optional: ckptlint does "
                "not depend on it), or leave out --plot")


def site_label(record: dict[str, Any]) -> str:
    site = record["site"]
    return f"{site['filename']}:{site['row']}:{site['column']}"


def row_label(record: dict[str, Any]) -> str:
    """The site, and the module when the site checkpoints several (one row each)."""
    module = _module(record)
    return site_label(record) + (f" {module}" if module != "-" else "")


def _module(record: dict[str, Any]) -> str:
    if record.get("module"):
        return record["module"]
    return f"({record['class']})" if record.get("class") else "-"


def _kept(record: dict[str, Any]) -> str:
    kept = record["input_bytes_kept_per_call"] + record["policy_bytes_kept_per_call"]
    return human_bytes(kept)


def _diff(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2g}" if value else "0"


def _call(record: dict[str, Any]) -> str:
    return record["recommendation"] + (f" ({record['code']})" if record["code"] else "")


def render_text(records: Sequence[dict[str, Any]], *, notes: Sequence[str] = (),
                command_seconds: float | None = None, alarm: str | None = None,
                advice: Sequence[str] = ()) -> str:
    """The alarm (checkpointing is not on) first, the table and its per-class roll-up, one
    reason per row, then what is left (advice) and the notes."""
    head = [f"ckptlint profile: {alarm}", ""] if alarm else []
    if not records:
        lines = [*head, "ckptlint profile: no checkpoint call ran.", *advice, *notes]
        return "\n".join(lines) + "\n"
    rows = []
    for r in records:
        rows.append((site_label(r), _module(r), str(r["calls"]),
                     human_bytes(r["activation_bytes_freed_per_call"]), _kept(r),
                     human_seconds(r["forward_seconds_per_call"]),
                     human_seconds(r["recompute_seconds_per_call"]),
                     _diff(r["grad_max_abs_diff"]), human_bytes(r["peak_bytes_saved"]),
                     _call(r)))
    calls = sum(r["calls"] for r in records)
    freed = sum(r["activation_bytes_freed_per_call"] * r["calls"] for r in records)
    forward = sum(r["forward_seconds_per_call"] * r["calls"] for r in records)
    recompute = sum(r["recompute_seconds_per_call"] * r["calls"] for r in records)
    peaks = [r["peak_bytes_saved"] for r in records if r["peak_bytes_saved"] is not None]
    diffs = [r["grad_max_abs_diff"] for r in records if r["grad_max_abs_diff"] is not None]
    counts = {k: sum(1 for r in records if r["recommendation"] == k) for k in ("keep", "drop", "fix")}
    kept = sum((r["input_bytes_kept_per_call"] + r["policy_bytes_kept_per_call"]) * r["calls"]
               for r in records)
    total = ("total (whole run)", "", str(calls), human_bytes(freed), human_bytes(kept),
             human_seconds(forward),
             human_seconds(recompute), _diff(max(diffs)) if diffs else "-",
             human_bytes(sum(peaks)) if peaks else "-",
             ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    out = head + _grid(COLUMNS, rows, total, left=2)
    out += _class_rollup(records)
    for r in records:
        out.append(f"{row_label(r)}: {_call(r)}: {r['reason']}")
    summary = (f"Activations freed are summed over all {calls} calls; recompute took about "
               f"{human_seconds(recompute)} in total")
    if command_seconds:
        summary += f" of the command's {human_seconds(command_seconds)}"
    out += ["", summary + "."]
    if advice:
        out += ["", *advice]
    out.extend(notes)
    return "\n".join(out) + "\n"


def _grid(columns, rows, total, left: int) -> list[str]:
    """An aligned table: the first `left` columns and the last one left-aligned."""
    widths = [max(len(row[i]) for row in [columns, *rows, total]) for i in range(len(columns))]

    def line(row):
        cells = [cell.ljust(widths[i]) if i < left or i == len(row) - 1 else
                 cell.rjust(widths[i]) for i, cell in enumerate(row)]
        return "  ".join(cells).rstrip()

    rule = line(tuple("-" * w for w in widths))
    return [line(columns), rule, *map(line, rows), rule, line(total), ""]


def _class_rollup(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per class of checkpointed module: how many modules, calls and bytes, in all."""
    by_class: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("class"):
            by_class.setdefault(r["class"], []).append(r)
    if not by_class:
        return []
    rows = []
    for cls, group in sorted(by_class.items(),
                             key=lambda kv: -sum(_freed_in_all(r) for r in kv[1])):
        calls = sum(r["calls"] for r in group)
        freed = sum(_freed_in_all(r) for r in group)
        recompute = sum(r["recompute_seconds_per_call"] * r["calls"] for r in group)
        counts = {k: sum(1 for r in group if r["recommendation"] == k)
                  for k in ("keep", "drop", "fix")}
        rows.append((cls, str(len({r["module"] for r in group})), str(calls),
                     human_bytes(freed / calls if calls else 0), human_bytes(freed),
                     human_seconds(recompute),
                     ", ".join(f"{n} {k}" for k, n in counts.items() if n)))
    total = ("all classes", str(sum(int(r[1]) for r in rows)), str(sum(int(r[2]) for r in rows)),
             "", human_bytes(sum(_freed_in_all(r) for g in by_class.values() for r in g)),
             human_seconds(sum(r["recompute_seconds_per_call"] * r["calls"]
                               for g in by_class.values() for r in g)), "")
    return ["By class of checkpointed module:", *_grid(CLASS_COLUMNS, rows, total, left=1)]


def _freed_in_all(record: dict[str, Any]) -> float:
    return record["activation_bytes_freed_per_call"] * record["calls"]


def matplotlib_available() -> bool:
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def plot_install_message() -> str:
    return PLOT_INSTALL.format(python=sys.executable or "python")


def write_plot(records: Sequence[dict[str, Any]], path: str) -> None:
    """Two bar charts side by side: activation memory freed and recompute time per site."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row_label(r) for r in records][::-1]
    freed = [r["activation_bytes_freed_per_call"] / 2**20 for r in records][::-1]
    recompute = [r["recompute_seconds_per_call"] * 1e3 for r in records][::-1]
    colours = {"keep": "tab:green", "drop": "tab:orange", "fix": "tab:red"}
    colour = [colours.get(r["recommendation"], "tab:gray") for r in records][::-1]
    height = max(2.5, 0.45 * len(records) + 1.2)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    left.barh(labels, freed, color=colour)
    left.set_xlabel("activation memory freed per call (MiB)")
    right.barh(labels, recompute, color=colour)
    right.set_xlabel("recompute time per call (ms)")
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="upper right", ncol=3, frameon=False)
    fig.suptitle("ckptlint profile: what each checkpoint buys and costs", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=120)
    plt.close(fig)
