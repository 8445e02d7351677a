"""Overhead of watching: step time of scripts/overhead.py watched vs unwatched.

    PYTHONPATH=. python tests/dynamic/measure_overhead.py [REPEATS] [STEPS] [WIDTH] [BATCH]

Runs the two alternately REPEATS times and reports the best of each (least disturbed by other
load) and the ratio. Not a timed test: the figure goes into the report.
"""

import io
import re
import subprocess
import sys
from pathlib import Path

from ckptlint.dynamic.runner import run_watched

SCRIPT = str(Path(__file__).parent / "scripts" / "overhead.py")


def seconds(text: str) -> float:
    return float(re.search(r"STEP_SECONDS (\S+)", text).group(1))


def main() -> None:
    defaults = ["5", "40", "256", "64"]
    repeats, steps, width, batch = (int(a) for a in sys.argv[1:] + defaults[len(sys.argv) - 1:])
    args = [sys.executable, SCRIPT, str(steps), str(width), str(batch)]
    plain, watched = [], []
    for _ in range(repeats):
        plain.append(seconds(subprocess.run(args, capture_output=True, text=True).stdout))
        sink = io.StringIO()
        run = run_watched(args, output=sink)
        watched.append(seconds(sink.getvalue()))
    print(f"batch {batch}, width {width}, 4 checkpointed blocks, {steps} steps, best of {repeats}: "
          f"unwatched {min(plain) * 1e3:.2f} ms/step, watched {min(watched) * 1e3:.2f} ms/step, "
          f"ratio {min(watched) / min(plain):.2f} ({len(run.observations.calls)} calls watched "
          "in the last run)")


if __name__ == "__main__":
    main()
