"""CKP204: a branch on a module attribute flipped between forward and backward (tanh vs
sigmoid save tensors of the same count and metadata, so torch's own check stays silent, but
the values differ and the gradients are wrong)."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, grads, report


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.use_tanh = True

    def forward(self, x):  # ckpt-target: A Block.forward
        h = self.lin(x)
        if self.use_tanh:  # ckpt-finding: CKP204 A self.use_tanh
            return torch.tanh(h)
        return torch.sigmoid(h)


def step(use_ckpt):
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 4, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)  # ckpt-site: A
    if HARMFUL:
        block.use_tanh = False
    out.sum().backward()
    block.use_tanh = False
    return grads(x, block.lin.weight)


report(plain=step(False), ckpt=step(True))
