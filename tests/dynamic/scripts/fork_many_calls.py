"""CALLS checkpoint calls in this process, then CALLS more in a `multiprocessing` child
forked right after (which ends with os._exit, like every multiprocessing child). With more
calls than the recorder writes in full, both processes hold summaries when the fork happens."""
import multiprocessing as mp
import os
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import report

torch.set_num_threads(1)


def block(x):  # ckpt-target: K block
    return torch.tanh(x)


def run(calls):
    x = torch.ones(4, requires_grad=True)
    for _ in range(calls):
        checkpoint(block, x, use_reentrant=False).sum().backward()  # ckpt-site: K


if __name__ == "__main__":
    calls = int(sys.argv[1])
    run(calls)
    child = mp.get_context("fork").Process(target=run, args=(calls,))
    child.start()
    child.join()
    report(parent=os.getpid(), child=child.pid, exitcode=child.exitcode)
