"""A reshape decided by state that changes between forward and backward: the saved tensor
keeps its element count but changes layout ([4, 4] -> [2, 8]); no known signature."""
import torch
from torch.utils.checkpoint import checkpoint

layout = (4, 4)


def block(x):
    return torch.sin(x.reshape(layout))


x = torch.randn(16, requires_grad=True)
out = checkpoint(block, x, use_reentrant=False)
layout = (2, 8)
out.sum().backward()
