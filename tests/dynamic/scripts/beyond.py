"""What the saved tensors cannot show: the segment bumps a module-level counter and draws from
Python's `random` (the value reaches no tensor). With checkpointing the counter counts every
call twice, and after each step the program's random stream is one draw further on than
without: the next step differs."""
import random

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import report

COUNT = 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        global COUNT
        COUNT += 1
        if random.random() < 2.0:
            x = x * 1.0
        return torch.tanh(self.lin(x))


def step(use_ckpt):
    global COUNT
    COUNT = 0
    random.seed(0)
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 4, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)
    out.sum().backward()
    return {"count": COUNT, "next_draw": random.random()}


report(plain=step(False), ckpt=step(True))
