"""The precision switch of dtype_cast.py with `debug=True`: torch raises a second
CheckpointError carrying its operator logs, chained to the metadata error."""
import torch
from torch.utils.checkpoint import checkpoint

COMPUTE_DTYPE = torch.bfloat16


def block(x):
    return torch.sin(x.to(COMPUTE_DTYPE))


x = torch.randn(4, 8, requires_grad=True)
out = checkpoint(block, x, use_reentrant=False, debug=True)
COMPUTE_DTYPE = torch.float32
out.float().sum().backward()
