"""CKP206: `sdpa_kernel(SDPBackend.MATH)` around a checkpointed attention call. With the
backward after the block (harmful) the replay picks the default CPU kernel and torch raises a
metadata CheckpointError; with the backward inside it (harmless) the replay runs MATH too.
The linter reports the call either way: the backward after the block is in the code."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointError, checkpoint

from _common import report


def attention(q):
    return F.scaled_dot_product_attention(q, q, q)


def step(q, backward_inside):
    with sdpa_kernel(SDPBackend.MATH):
        out = checkpoint(attention, q, use_reentrant=False)
        if backward_inside:
            out.sum().backward()
            return
    out.sum().backward()


torch.manual_seed(0)
q = torch.randn(2, 4, 8, 16, requires_grad=True)
try:
    step(q, backward_inside="harmless" in sys.argv[1:])
    report(error=None)
except CheckpointError as error:
    report(error=str(error).splitlines()[0])
