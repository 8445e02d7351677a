"""CKP401: a counter bumped inside the segment. Harmful: bumped before the last saved tensor,
so the replay bumps it again. Harmless: bumped after it; non-reentrant early stop ends the
replay before that line."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, REENTRANT, report


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):  # ckpt-target: A Block.forward
        if HARMFUL:
            self.calls += 1  # ckpt-finding: CKP401 A self.calls
        out = torch.tanh(self.lin(x))
        if not HARMFUL:
            self.calls += 1  # ckpt-finding: CKP401 A self.calls
        return out


def run(use_ckpt):
    torch.manual_seed(0)
    block = Block()
    for _ in range(2):
        x = torch.randn(2, 4, requires_grad=True)
        out = checkpoint(block, x, use_reentrant=REENTRANT) if use_ckpt else block(x)  # ckpt-site: A
        out.sum().backward()
    return block.calls


report(plain=run(False), ckpt=run(True))
