"""A branch on a flag that flips between forward and backward so that the replay saves more
tensors, with `early_stop=False` (otherwise torch stops the replay early and says nothing)."""
import torch
from torch.utils.checkpoint import checkpoint

use_gate = False


def block(x):
    h = torch.sin(x)
    if use_gate:
        h = torch.sigmoid(h) * torch.cos(h)
    return torch.cos(h)


x = torch.randn(3, 3, requires_grad=True)
out = checkpoint(block, x, use_reentrant=False, early_stop=False)
use_gate = True
out.sum().backward()
