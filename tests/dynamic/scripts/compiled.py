"""A checkpoint inside torch.compile: ckptlint must say it was not watched, and not break it."""
import torch
from torch.utils.checkpoint import checkpoint

from _common import report

SCALE = 1.0


def block(x):  # ckpt-target: C block
    return torch.tanh(x * SCALE)  # ckpt-finding: CKP201 C SCALE


@torch.compile(backend="eager")
def model(x):
    return checkpoint(block, x, use_reentrant=False)  # ckpt-site: C


x = torch.ones(3, requires_grad=True)
model(x).sum().backward()
report(grad=x.grad.tolist())
