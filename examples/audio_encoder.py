"""A small streaming audio encoder (Conformer-style) with activation checkpointing.

Hazards a reviewer would miss:
- `EncoderLayer.forward` reads and rewrites `self.cache`, a temporal cache attribute: the
  replay during backward sees the cache the forward already overwrote.
- the loudness gain `GAIN` is a module global that the training loop anneals between steps.
Clean uses: a shape-dependent branch, a dtype-only cast and a positional table moved to the
input's own device.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

GAIN = 1.0


def set_gain(value: float) -> None:
    global GAIN
    GAIN = value


class ConvSubsampling(nn.Module):
    def __init__(self, n_mels: int, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(n_mels, dim, kernel_size=3, stride=2, padding=1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.conv(features.transpose(1, 2))).transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, context: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))
        self.conv = nn.Conv1d(dim, dim, kernel_size=3, padding=1, groups=dim)
        self.context = context
        self.cache = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cache is not None:
            x = torch.cat([self.cache, x], dim=1)[:, -x.shape[1]:]
        self.cache = x.detach()[:, -self.context:]
        h = self.norm(x)
        if h.shape[1] > 1:
            h = h + self.conv(h.transpose(1, 2)).transpose(1, 2)
        return x + GAIN * self.ff(h)


class AudioEncoder(nn.Module):
    def __init__(self, n_mels: int = 16, dim: int = 32, depth: int = 2, context: int = 4) -> None:
        super().__init__()
        self.subsample = ConvSubsampling(n_mels, dim)
        self.layers = nn.ModuleList([EncoderLayer(dim, context) for _ in range(depth)])
        self.register_buffer("positions", torch.randn(512, dim) * 0.02)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.subsample(features.float())
        x = x + self.positions[: x.shape[1]].to(x.device)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return x

    def reset_cache(self) -> None:
        for layer in self.layers:
            layer.cache = None
