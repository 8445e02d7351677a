"""A checkpoint inside torch.compile: ckptlint must say it was not watched, and not break it.
A second, eager checkpoint site is defined but never called: it is unexercised, not "not
watched"."""
import torch
from torch.utils.checkpoint import checkpoint

from _common import report

SCALE = 1.0


def block(x):  # ckpt-target: C block
    return torch.tanh(x * SCALE)  # ckpt-finding: CKP201 C SCALE


def eager_block(x):  # ckpt-target: E eager_block
    return torch.sin(x * SCALE)  # ckpt-finding: CKP201 E SCALE


@torch.compile(backend="eager")
def model(x):
    return checkpoint(block, x, use_reentrant=False)  # ckpt-site: C


def eager_model(x):
    return checkpoint(eager_block, x, use_reentrant=False)  # ckpt-site: E


x = torch.ones(3, requires_grad=True)
model(x).sum().backward()
compiled = x.grad.tolist()
x.grad = None
block(x).sum().backward()
report(grad=compiled, plain=x.grad.tolist())
