"""Step time of the test encoder, plain vs under `ckptlint profile` (not a test: a script).

    .venv/bin/python tests/profile/measure_overhead.py [STEPS] [REPEATS]

Runs `scripts/encoder.py STEPS --timing` (one thread, CPU time per step, the first two steps
are warm-up) plain,
under `ckptlint profile`, and under `ckptlint profile --grad-check`, alternating, REPEATS times
each, and prints the best of the per-run median step times and the overhead relative to
plain (best-of, because other processes on a shared machine only ever add time).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable


def step_seconds(prefix):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run([*prefix, PY, "encoder.py", STEPS, "--timing"], cwd=HERE / "scripts",
                         env=env, capture_output=True, text=True, check=True)
    return float(re.search(r"STEP_SECONDS ([\d.]+)", out.stdout + out.stderr).group(1))


STEPS = sys.argv[1] if len(sys.argv) > 1 else "30"
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
VARIANTS = {
    "plain": [],
    "profile": [PY, "-m", "ckptlint", "profile", "--format", "json", "--"],
    "profile --grad-check": [PY, "-m", "ckptlint", "profile", "--grad-check", "--format",
                             "json", "--"],
}
times = {name: [] for name in VARIANTS}
for _ in range(REPEATS):
    for name, prefix in VARIANTS.items():
        times[name].append(step_seconds(prefix))
plain = min(times["plain"])
for name, values in times.items():
    median = min(values)
    print(f"{name:22s} {median * 1e3:8.2f} ms/step  ({(median / plain - 1) * 100:+.1f}% vs plain)"
          f"  runs: {', '.join(f'{v * 1e3:.2f}' for v in values)}")
