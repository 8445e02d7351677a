"""Trains a fixture project's `model.Net` under DistributedDataParallel with
`find_unused_parameters=True`, on CPU with gloo and two ranks (torch.multiprocessing spawn).

Usage: python tests/distributed/ddp_train_fixture.py PROJECT_DIR OUT_DIR. Each rank writes
OUT_DIR/rank<N>.txt: `ok` after two training steps, else the error's type and message.
It lives outside `tests/` itself, whose `profile` package would shadow the standard library's
module (torch imports it) with this script's folder first on `sys.path`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def run(rank: int, project: str, out: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    sys.path.insert(0, project)
    from model import Net

    torch.manual_seed(0)
    result = "ok"
    try:
        ddp = DistributedDataParallel(Net(), find_unused_parameters=True)
        for _ in range(2):
            ddp(torch.randn(2, 4, requires_grad=True)).sum().backward()
    except Exception as error:  # the outcome is the result: written for the test to read
        result = f"{type(error).__name__}: {error}"
    Path(out, f"rank{rank}.txt").write_text(result, encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    project, out, port = sys.argv[1], sys.argv[2], sys.argv[3]
    mp.spawn(run, args=(project, out, port), nprocs=2, join=True)
