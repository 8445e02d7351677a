\
r"""CKP201 in a script whose first line is a lone `\` continuation (static positions and the
lines the watcher sees must agree for the call to join its site)."""
import torch
from torch.utils.checkpoint import checkpoint

from _common import grads, report

SCALE = 1.0


def block(x):
    return torch.tanh(x * SCALE)


def step(use_ckpt):
    global SCALE
    SCALE = 1.0
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)
    SCALE = 2.0
    out.sum().backward()
    return grads(x)


report(plain=step(False), ckpt=step(True))
