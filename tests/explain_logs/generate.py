"""Run the programs in `programs/` under torch and write what they print to `real/<name>.log`.

    python tests/explain_logs/generate.py [NAME...]     # all programs, or those named

Each log is the program's stdout and stderr, as it printed them, with the checkout's folder
written as `<checkout>` so that the logs read the same on every machine. Programs named
`ddp_*` run under `torchrun --nproc_per_node 2` (gloo, CPU). tests/test_explain.py reads the
committed logs in the quick loop and, marked slow, runs the programs again and checks that
fresh output is explained the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

if not __package__:     # run as a script: import the checkout's tests package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import process_tree  # noqa: E402

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
REAL = HERE / "real"
CHECKOUT = HERE.parents[1]


def command(program: Path) -> list[str]:
    if program.name.startswith("ddp_"):
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                str(program)]
    return [sys.executable, str(program)]


def run_program(program: Path) -> bytes:
    """What the program prints (stdout and stderr together), the checkout as `<checkout>`."""
    environment = {**os.environ, "PYTHONWARNINGS": "default", "OMP_NUM_THREADS": "1"}
    done = process_tree.run(command(program), cwd=PROGRAMS, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return done.stdout.replace(str(CHECKOUT).encode(), b"<checkout>")


def main() -> None:
    REAL.mkdir(exist_ok=True)
    names = set(sys.argv[1:])
    for program in sorted(PROGRAMS.glob("*.py")):
        if names and program.stem not in names:
            continue
        (REAL / f"{program.stem}.log").write_bytes(run_program(program))
        print("wrote", REAL / f"{program.stem}.log")


if __name__ == "__main__":
    main()
