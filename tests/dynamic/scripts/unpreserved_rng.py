"""CKP302: dropout under preserve_rng_state=False. Harmful in training mode; harmless when the
model is in eval mode (dropout draws nothing)."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import ARGS, HARMFUL, grads, report


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):  # ckpt-target: A Block.forward
        return torch.tanh(self.drop(self.lin(x)))  # ckpt-finding: CKP302 A


DEVICE = "cuda" if "cuda" in ARGS else "cpu"


def step(use_ckpt):
    torch.manual_seed(0)
    block = Block().to(DEVICE)
    block.train(HARMFUL)
    x = torch.randn(3, 4, device=DEVICE, requires_grad=True)
    if use_ckpt:
        out = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)  # ckpt-site: A
    else:
        out = block(x)
    out.sum().backward()
    return grads(x, block.lin.weight)


report(plain=step(False), ckpt=step(True), after=torch.rand(3).tolist())
