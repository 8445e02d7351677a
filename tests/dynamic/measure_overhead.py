"""Overhead of watching: step time of scripts/overhead.py watched vs unwatched.

    PYTHONPATH=.:tests/dynamic python tests/dynamic/measure_overhead.py [REPEATS] [STEPS] [WIDTH] [BATCH]

Runs three ways alternately REPEATS times and reports the best of each (least disturbed by
other load): unwatched; watched with no findings (ops, checksums, saved tensors); watched
with the script's marked findings (a CKP401 counter and a CKP204 branch: their state is read
around each pass and their lines are traced in the segment's frames). Not a timed test: the
figures go into the report.
"""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from ckptlint.dynamic.runner import run_watched
from ckptlint.dynamic.verdicts import build_plan

from dynhelp import findings_for

SCRIPT = str(Path(__file__).parent / "scripts" / "overhead.py")


def seconds(text: str) -> float:
    return float(re.search(r"STEP_SECONDS (\S+)", text).group(1))


def main() -> None:
    defaults = ["5", "40", "256", "64"]
    repeats, steps, width, batch = (int(a) for a in sys.argv[1:] + defaults[len(sys.argv) - 1:])
    args = [sys.executable, SCRIPT, str(steps), str(width), str(batch)]
    os.chdir(os.path.dirname(SCRIPT))         # the findings name the script relative to it
    plan = build_plan(findings_for("overhead.py"))
    plain, watched, traced = [], [], []
    for _ in range(repeats):
        plain.append(seconds(subprocess.run(args, capture_output=True, text=True).stdout))
        sink = io.StringIO()
        run = run_watched(args, output=sink)
        watched.append(seconds(sink.getvalue()))
        sink = io.StringIO()
        run_watched(args, output=sink, plan=plan)
        traced.append(seconds(sink.getvalue()))
    base = min(plain)
    print(f"batch {batch}, width {width}, 4 checkpointed blocks, {steps} steps, best of {repeats}: "
          f"unwatched {base * 1e3:.2f} ms/step; watched {min(watched) * 1e3:.2f} ms/step "
          f"(ratio {min(watched) / base:.2f}); watched with traced findings "
          f"{min(traced) * 1e3:.2f} ms/step (ratio {min(traced) / base:.2f}); "
          f"{len(run.observations.calls)} calls watched in the last run")


if __name__ == "__main__":
    main()
