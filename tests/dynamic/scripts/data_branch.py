"""CKP203 (+CKP303): a branch on tensor values. Harmful: the values come from Python `random`,
which checkpoint does not restore, so the replay can take the other branch. Harmless: the
branch depends only on the input values, identical on replay."""
import os
import random
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, grads, report


def block(x):  # ckpt-target: A block
    noise = random.random() if HARMFUL else 0.0  # ckpt-finding: CKP303 A
    h = x + noise
    if h.sum() > 1.5:  # ckpt-finding: CKP203 A
        return torch.sin(h)
    return torch.cos(h)


def step(use_ckpt):
    torch.manual_seed(0)
    random.seed(3)   # forward draws 0.238 (sum 0.99: cos), replay 0.544 (sum 2.2: sin)
    x = (torch.zeros(2, 2) + 0.01).requires_grad_()
    out = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)  # ckpt-site: A
    out.sum().backward()
    return grads(x)


report(plain=step(False), ckpt=step(True))
if "hard-exit" in sys.argv:
    os._exit(9)   # dies without cleanup: what was watched must still be reported
