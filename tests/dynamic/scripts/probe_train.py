"""One checkpointed MLP block; its only saved activation is the 8x64 float32 relu output."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

block = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
x = torch.randn(8, 64, requires_grad=True)
checkpoint(block, x, use_reentrant=False).sum().backward()
