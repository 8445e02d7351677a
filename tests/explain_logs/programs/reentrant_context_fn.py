"""`debug=True` (or a `context_fn`) passed to a reentrant checkpoint: torch refuses it."""
import torch
from torch.utils.checkpoint import checkpoint

x = torch.randn(2, 2, requires_grad=True)
checkpoint(torch.sin, x, use_reentrant=True, debug=True)
