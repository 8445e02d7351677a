"""A branch on a flag that flips between forward and backward: the replay saves fewer tensors
(non-reentrant checkpoint, "A different number of tensors was saved")."""
import torch
from torch.utils.checkpoint import checkpoint

use_gate = True


def block(x):
    h = torch.sin(x)
    if use_gate:
        h = torch.sigmoid(h) * torch.cos(h)
    return h


x = torch.randn(3, 3, requires_grad=True)
out = checkpoint(block, x, use_reentrant=False)
use_gate = False
out.sum().backward()
