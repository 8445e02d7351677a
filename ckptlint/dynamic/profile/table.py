"""Text table and bar chart for `ckptlint profile` (records as in README.md's profile JSON)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Sequence

from ckptlint.dynamic.profile.report import human_bytes, human_seconds

COLUMNS = ("site", "calls", "freed/call", "forward/call", "recompute/call", "grad diff",
           "peak saved", "call")

PLOT_INSTALL = ("--plot needs matplotlib, which is not installed for {python}; install it "
                "with `{python} -m pip install matplotlib` (it is optional: ckptlint does "
                "not depend on it), or leave out --plot")


def site_label(record: dict[str, Any]) -> str:
    site = record["site"]
    return f"{site['filename']}:{site['row']}:{site['column']}"


def _diff(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2g}" if value else "0"


def _call(record: dict[str, Any]) -> str:
    return record["recommendation"] + (f" ({record['code']})" if record["code"] else "")


def render_text(records: Sequence[dict[str, Any]], *, notes: Sequence[str] = (),
                command_seconds: float | None = None) -> str:
    if not records:
        lines = ["ckptlint profile: no checkpoint call ran."]
        lines.extend(notes)
        return "\n".join(lines) + "\n"
    rows = []
    for r in records:
        rows.append((site_label(r), str(r["calls"]), human_bytes(r["activation_bytes_freed_per_call"]),
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
    total = ("total (whole run)", str(calls), human_bytes(freed), human_seconds(forward),
             human_seconds(recompute), _diff(max(diffs)) if diffs else "-",
             human_bytes(sum(peaks)) if peaks else "-",
             ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    widths = [max(len(row[i]) for row in [COLUMNS, *rows, total]) for i in range(len(COLUMNS))]

    def line(row):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(widths[i]) for i, cell in enumerate(row[1:-1], 1)]
        cells.append(row[-1])
        return "  ".join(cells).rstrip()

    out = [line(COLUMNS), line(tuple("-" * w for w in widths)), *map(line, rows),
           line(tuple("-" * w for w in widths)), line(total), ""]
    for r in records:
        out.append(f"{site_label(r)}: {_call(r)}: {r['reason']}")
    summary = (f"Activations freed are summed over all {calls} calls; recompute took about "
               f"{human_seconds(recompute)} in total")
    if command_seconds:
        summary += f" of the command's {human_seconds(command_seconds)}"
    out += ["", summary + "."]
    out.extend(notes)
    return "\n".join(out) + "\n"


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

    labels = [site_label(r) for r in records][::-1]
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
