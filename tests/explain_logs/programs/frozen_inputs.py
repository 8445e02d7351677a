"""A reentrant checkpoint whose inputs are all frozen (embeddings of a frozen base model): torch
warns that gradients will be None and the block's parameters get none."""
import torch
from torch.utils.checkpoint import checkpoint

layer = torch.nn.Linear(4, 4)
frozen_embeddings = torch.randn(2, 4)  # requires_grad=False
out = checkpoint(layer, frozen_embeddings, use_reentrant=True)
print("weight grad after backward:", layer.weight.grad)
