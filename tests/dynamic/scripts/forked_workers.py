"""CKP201 under `multiprocessing` with fork: the parent runs one checkpointed step, then a
forked worker whose global changes between forward and backward (harmful, 2 steps), then a
clean forked worker (3 steps), then a fork Pool of 2 workers (6 clean steps). Ground truth
from gradients, per worker: 12 calls in 4+ processes, 2 of them diverged."""
import multiprocessing as mp
import os

import torch
from torch.utils.checkpoint import checkpoint

from _common import grads, report

torch.set_num_threads(1)
SCALE = 1.0


def block(x, w):  # ckpt-target: F block
    return torch.tanh(x @ w * SCALE)  # ckpt-finding: CKP201 F SCALE


def step(use_ckpt, harmful=False):
    global SCALE
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    SCALE = 1.0
    out = checkpoint(block, x, w, use_reentrant=False) if use_ckpt else block(x, w)  # ckpt-site: F
    if harmful:
        SCALE = 3.0
    out.sum().backward()
    SCALE = 1.0
    return grads(x, w)


def worker(harmful, steps, queue):
    plain = step(False)
    differs = [step(True, harmful) != plain for _ in range(steps)]
    queue.put({"pid": os.getpid(), "harmful": harmful, "differs": differs})


def pool_task(_):
    return os.getpid(), step(True) != step(False)


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    results = [{"pid": os.getpid(), "harmful": False, "differs": [step(True) != step(False)]}]
    queue = ctx.Queue()
    for harmful, steps in ((True, 2), (False, 3)):
        process = ctx.Process(target=worker, args=(harmful, steps, queue))
        process.start()
        results.append(queue.get())
        process.join()
    with ctx.Pool(2) as pool:
        for pid, differs in pool.map(pool_task, range(6), chunksize=1):
            results.append({"pid": pid, "harmful": False, "differs": [differs]})
    report(workers=results)
