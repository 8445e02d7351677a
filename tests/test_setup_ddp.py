"""CKP601's DDP pairing tested for real: the fixture project it reports fails in training,
and its safe twin (non-reentrant) trains (torch 2.13 CPU, gloo, two ranks)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests import process_tree
from tests.cli_helpers import run_cli

pytest.importorskip("torch")
PROJECTS = Path(__file__).parent / "fixtures" / "projects"
TRAIN = Path(__file__).parent / "distributed" / "ddp_train_fixture.py"


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def train(project: Path, out: Path) -> list[str]:
    """Each rank's outcome, which it writes before tearing its process group down. The exit
    status is not the outcome: after both ranks fail in backward, gloo's teardown sometimes
    aborts one of them (SIGABRT) once its outcome is written."""
    done = process_tree.run([sys.executable, str(TRAIN), str(project), str(out), free_port()],
                            timeout=240, capture_output=True, text=True)
    outcomes = [out / f"rank{rank}.txt" for rank in range(2)]
    assert all(path.is_file() for path in outcomes), done.stderr[-3000:]
    return [path.read_text() for path in outcomes]


def ckp601(project: Path) -> list[str]:
    result = run_cli("--select", "CKP601", "--no-cache", ".", cwd=project)
    return [line for line in result.stdout.splitlines() if "CKP601" in line]


@pytest.mark.slow
def test_reentrant_checkpoint_under_ddp_find_unused_parameters_fails_as_reported(tmp_path):
    project = PROJECTS / "setup_ddp_unused"
    [reported] = ckp601(project)
    assert "Expected to mark a variable ready only once" in reported
    for outcome in train(project, tmp_path):
        assert outcome.startswith("RuntimeError: Expected to mark a variable ready only once")


@pytest.mark.slow
def test_the_non_reentrant_twin_trains_and_is_not_reported(tmp_path):
    project = PROJECTS / "setup_ddp_unused_safe"
    assert ckp601(project) == []
    assert train(project, tmp_path) == ["ok", "ok"]
