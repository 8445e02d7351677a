"""A kernel-selection context left before the backward: the forward ran the math SDPA kernel
inside `sdpa_kernel(SDPBackend.MATH)`, the replay (after the block) picks another kernel, whose
saved tensors have other ranks; one of them happens to be twice as long in one dimension."""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
q = torch.randn(2, 4, 8, 16, requires_grad=True)


def block(q):
    return torch.nn.functional.scaled_dot_product_attention(q, q, q)


with sdpa_kernel(SDPBackend.MATH):
    out = checkpoint(block, q, use_reentrant=False)
out.sum().backward()
