"""A decoder-only transformer with a mixture-of-experts feed-forward, checkpointed per block.

Hazards:
- `MoEFeedForward.forward` appends its load-balancing loss to `self.aux_losses`: under
  checkpointing the append happens again during backward (Megatron-LM#1330).
- `Block.forward` logs a warning when activations overflow: branch on tensor values, and the
  warning fires twice.
- `LoRABlock` is checkpointed with `preserve_rng_state=False` while LoRA dropout runs inside
  (the litgpt/OLMo bug: the replay draws a different dropout mask).
Clean: `Block` itself is checkpointed non-reentrant with RNG preserved, dropout included.
"""

import logging
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

logger = logging.getLogger(__name__)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, length, dim))


class MoEFeedForward(nn.Module):
    def __init__(self, dim: int, experts: int) -> None:
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList([nn.Linear(dim, dim) for _ in range(experts)])
        self.aux_losses = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.router(x).softmax(-1)
        self.aux_losses.append((probs.mean((0, 1)) ** 2).sum() * len(self.experts))
        return sum(probs[..., i:i + 1] * expert(x) for i, expert in enumerate(self.experts))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, experts: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.moe = MoEFeedForward(dim, experts)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.dropout(self.attn(self.norm1(x)))
        if torch.isinf(h).any():
            logger.warning("overflow in attention output")
        return h + self.moe(self.norm2(h))


class LoRALinear(nn.Module):
    def __init__(self, dim: int, rank: int = 4, dropout: float = 0.05) -> None:
        super().__init__()
        self.base = nn.Linear(dim, dim)
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)
        self.lora_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(self.lora_dropout(x)))


class LoRABlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = LoRALinear(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(self.norm(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, depth: int = 2,
                 experts: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, experts) for _ in range(depth)])
        self.adapter = LoRABlock(dim)
        self.head = nn.Linear(dim, vocab)
        self.fast_checkpoint = partial(checkpoint, use_reentrant=False, preserve_rng_state=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        x = self.fast_checkpoint(self.adapter, x)
        return self.head(x)

    def aux_loss(self) -> torch.Tensor:
        losses = [loss for block in self.blocks for loss in block.moe.aux_losses]
        return torch.stack(losses).mean()

    def clear_aux_losses(self) -> None:
        for block in self.blocks:
            block.moe.aux_losses.clear()
