"""CKP201: a global read inside the segment, changed between forward and backward (harmful)
or only after backward (harmless)."""
import torch
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, REENTRANT, grads, report

SCALE = 1.0


def block(x, w):  # ckpt-target: A block
    return torch.tanh(x @ w * SCALE)  # ckpt-finding: CKP201 A SCALE


def step(use_ckpt):
    global SCALE
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    SCALE = 1.0
    if use_ckpt:
        out = checkpoint(block, x, w, use_reentrant=REENTRANT)  # ckpt-site: A
    else:
        out = block(x, w)
    if HARMFUL:
        SCALE = 3.0
    out.sum().backward()
    SCALE = 3.0
    return grads(x, w)


plain = step(False)
report(plain=plain, ckpt=step(True), ckpt2=step(True))
