"""Overhead of watching: step time watched vs unwatched, medians of several runs.

    PYTHONPATH=.:tests/dynamic python tests/dynamic/measure_overhead.py [REPEATS] [STEPS] [WIDTH] [BATCH]
    PYTHONPATH=.:tests/dynamic python tests/dynamic/measure_overhead.py --transformers [REPEATS] [STEPS]

scripts/overhead.py (a small checkpointed MLP) runs three ways, alternately, REPEATS times:
unwatched; watched with no findings (ops, checksums, saved tensors); watched with the script's
marked findings (a CKP401 counter and a CKP204 branch: their state is read around each pass
and their lines are traced in the segment's frames). With --transformers, scripts/hf_overhead.py
(a tiny GPT-2 built from its config) runs unwatched and watched. Each run prints its CPU and
wall time per step; this reports the median of each way (CPU time is the steadier figure when
other work shares the machine). Not a timed test: the figures go into the report.
"""

import io
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from ckptlint.dynamic.runner import run_watched
from ckptlint.dynamic.verdicts import build_plan

from dynhelp import findings_for

SCRIPTS = Path(__file__).parent / "scripts"


def step_seconds(text: str) -> tuple[float, float]:
    """(CPU, wall) seconds per step, as the script printed them."""
    wall, cpu = re.search(r"STEP_SECONDS (\S+) CPU (\S+)", text).groups()
    return float(cpu), float(wall)


def unwatched(args: list[str]) -> tuple[float, float]:
    return step_seconds(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def watched(args: list[str], plan=None) -> tuple[float, float]:
    sink = io.StringIO()
    run_watched(args, output=sink, plan=plan)
    return step_seconds(sink.getvalue())


def report(title: str, ways: dict[str, list[tuple[float, float]]]) -> None:
    """Medians per way, and each way's ratio to the first (the unwatched run)."""
    medians = {name: (statistics.median(s[0] for s in samples),
                      statistics.median(s[1] for s in samples)) for name, samples in ways.items()}
    base_cpu, base_wall = next(iter(medians.values()))
    print(title)
    for name, (cpu, wall) in medians.items():
        print(f"  {name:<26} CPU {cpu * 1e3:8.2f} ms/step (x{cpu / base_cpu:.2f})   "
              f"wall {wall * 1e3:8.2f} ms/step (x{wall / base_wall:.2f})")


def mlp_run(repeats: int, steps: int, width: int, batch: int) -> None:
    args = [sys.executable, str(SCRIPTS / "overhead.py"), str(steps), str(width), str(batch)]
    os.chdir(SCRIPTS)                         # the findings name the script relative to it
    plan = build_plan(findings_for("overhead.py"))
    ways: dict[str, list[tuple[float, float]]] = {"unwatched": [], "watched": [],
                                                  "watched, traced findings": []}
    for _ in range(repeats):
        ways["unwatched"].append(unwatched(args))
        ways["watched"].append(watched(args))
        ways["watched, traced findings"].append(watched(args, plan))
    report(f"MLP: batch {batch}, width {width}, 4 checkpointed blocks, {steps} steps, "
           f"median of {repeats} runs", ways)


def transformers_run(repeats: int, steps: int) -> None:
    args = [sys.executable, str(SCRIPTS / "hf_overhead.py"), str(steps)]
    ways: dict[str, list[tuple[float, float]]] = {"unwatched": [], "watched": []}
    for _ in range(repeats):
        ways["unwatched"].append(unwatched(args))
        ways["watched"].append(watched(args))
    report(f"tiny GPT-2 (4 checkpointed layers, width 128, batch 4 x 64 tokens), {steps} steps, "
           f"median of {repeats} runs", ways)


def main() -> None:
    if sys.argv[1:2] == ["--transformers"]:
        given = sys.argv[2:]
        transformers_run(*(int(a) for a in given + ["5", "10"][len(given):]))
        return
    given = sys.argv[1:]
    mlp_run(*(int(a) for a in given + ["5", "40", "256", "64"][len(given):]))


if __name__ == "__main__":
    main()
