"""CKP101: reentrant checkpoint. Harmful: no input requires grad (frozen embedding output), so
the block's parameters get no gradient. Harmless: the flag is False at run time."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, grads, report

USE_REENTRANT = HARMFUL


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # ckpt-target: A Block.forward
        return torch.tanh(self.lin(x))


def step(use_ckpt):
    torch.manual_seed(0)
    embed = nn.Embedding(5, 4).requires_grad_(False)
    block = Block()
    h = embed(torch.tensor([1, 2, 3]))
    if use_ckpt:
        out = checkpoint(block, h, use_reentrant=USE_REENTRANT)  # ckpt-site: A ckpt-finding: CKP101 A
    else:
        out = block(h)
    if out.requires_grad:
        out.sum().backward()
    return grads(block.lin.weight)


report(plain=step(False), ckpt=step(True))
