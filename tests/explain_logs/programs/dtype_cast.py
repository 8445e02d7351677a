"""A cast decided by state that changes between forward and backward: the replay saves fp32
where the forward saved bf16 (non-reentrant checkpoint, metadata CheckpointError)."""
import torch
from torch.utils.checkpoint import checkpoint

COMPUTE_DTYPE = torch.bfloat16


def block(x):
    return torch.sin(x.to(COMPUTE_DTYPE))


x = torch.randn(4, 8, requires_grad=True)
out = checkpoint(block, x, use_reentrant=False)
COMPUTE_DTYPE = torch.float32  # a precision switch after the forward
out.float().sum().backward()
