"""A checkpointed MLP that does everything right: nothing here should be flagged."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class ResidualMLP(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.fc2(self.dropout(torch.relu(self.fc1(self.norm(x)))))
        if mask is not None:
            h = h * mask.to(h.dtype)
        if self.training and x.dim() == 3:
            h = h * torch.ones(x.shape[-1], device=x.device)
        return x + h


class Stack(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList([ResidualMLP(dim, 4 * dim) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return x
