"""Keyword arguments to a reentrant checkpoint: torch refuses them."""
import torch
from torch.utils.checkpoint import checkpoint


def block(x, scale=1.0):
    return torch.sin(x) * scale


x = torch.randn(2, 2, requires_grad=True)
checkpoint(block, x, scale=2.0, use_reentrant=True)
