"""Disk, memory and time of watching many checkpoint calls (scripts/many_calls.py).

    PYTHONPATH=. python tests/dynamic/measure_budget.py [CALLS ...]

For each CALLS (default 1000 10000 200000) runs the tiny segment CALLS times under the
dynamic-mode watcher in a fresh Python process that plays the parent side of `ckptlint
dynamic` (the run, the progress counter, loading the observations, the verdicts) and prints the largest size the
observations file reached, how much this process's peak RSS grew, the wall time and the
verdict. Not a timed test: the figures go into the README ("Dynamic mode").
"""

import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ckptlint.dynamic.runner import PACKAGE_ROOT, run_watched
from ckptlint.dynamic.verdicts import build_plan, judge_all

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dynhelp import findings_for  # noqa: E402

SCRIPT = HERE / "scripts" / "many_calls.py"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def largest_file(folder: str, stop: threading.Event, seen: list[int]) -> None:
    while not stop.wait(0.2):
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    seen[0] = max(seen[0], os.path.getsize(os.path.join(root, name)))
                except OSError:
                    pass


def measure(calls: int) -> str:
    os.chdir(SCRIPT.parent)        # the findings name the script relative to its folder
    findings = findings_for("many_calls.py")
    plan = build_plan(findings)
    with tempfile.TemporaryDirectory(prefix="ckpt-budget-") as tmp:
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = None
        stop, seen = threading.Event(), [0]
        poller = threading.Thread(target=largest_file, args=(tmp, stop, seen), daemon=True)
        poller.start()
        before = peak_rss_mb()
        start = time.monotonic()
        lines = []
        watched = run_watched([sys.executable, str(SCRIPT), str(calls)], plan=plan,
                              output=open(os.devnull, "w"), progress=lines.append,
                              progress_every=5.0,
                              env={**os.environ, "PYTHONPATH": PACKAGE_ROOT})
        [finding] = judge_all(findings, watched.observations, (), watched.info, plan)
        seconds = time.monotonic() - start
        stop.set()
        poller.join()
        tempfile.tempdir = None
    assert watched.info.returncode == 0, watched.info.stderr_tail
    return (f"{calls} calls: file {seen[0] / 1e6:.2f} MB ({seen[0] / calls:.0f} B/call), "
            f"parent peak RSS +{peak_rss_mb() - before:.1f} MB, "
            f"{len(watched.observations.calls)} records kept, {seconds:.0f} s "
            f"({seconds / calls * 1e3:.2f} ms/call), {len(lines)} progress lines; "
            f"{finding.verdict}: {finding.evidence}")


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        print(measure(int(sys.argv[2])), flush=True)
        return
    for calls in sys.argv[1:] or ["1000", "10000", "200000"]:
        subprocess.run([sys.executable, __file__, "--one", calls], check=True)


if __name__ == "__main__":
    main()
