"""Selective activation checkpointing (torchtitan's default): a policy saves the matmuls, so the
replay takes them from a cache and recomputes only the rest. Harmless: nothing changes
between forward and backward. Harmful: SCALE, read after the saved matmul, changes."""
import functools

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from _common import HARMFUL, grads, report

SCALE = 1.0
SAVED = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):  # ckpt-target: S Block.forward
        h = torch.relu(self.a(x)) * SCALE  # ckpt-finding: CKP201 S SCALE
        return torch.sigmoid(self.b(h)).view(-1)


def step(use_ckpt):
    global SCALE
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(4, 8, requires_grad=True)
    SCALE = 1.0
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    if use_ckpt:
        out = checkpoint(block, x, use_reentrant=False, context_fn=context)  # ckpt-site: S
    else:
        out = block(x)
    if HARMFUL:
        SCALE = 2.0
    out.sum().backward()
    return grads(x, *block.parameters())


report(plain=step(False), ckpt=step(True))
