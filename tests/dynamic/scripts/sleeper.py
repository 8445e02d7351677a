"""Runs one checkpoint step, then hangs (for --timeout)."""
import time

import torch
from torch.utils.checkpoint import checkpoint


def block(x):  # ckpt-target: T block
    return torch.tanh(x)


x = torch.ones(3, requires_grad=True)
checkpoint(block, x, use_reentrant=False).sum().backward()  # ckpt-site: T
print("step done", flush=True)
time.sleep(600)
