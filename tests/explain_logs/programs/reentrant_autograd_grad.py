"""`torch.autograd.grad` through a reentrant checkpoint: torch refuses it."""
import torch
from torch.utils.checkpoint import checkpoint

x = torch.randn(2, 2, requires_grad=True)
out = checkpoint(torch.sin, x, use_reentrant=True)
torch.autograd.grad(out.sum(), x)
