"""Every way in: module-top `from ... import checkpoint`, functools.partial, checkpoint_sequential,
checkpoint_wrapper, apply_activation_checkpointing, composable checkpoint, a transformers-style
GradientCheckpointingLayer; reentrant and non-reentrant. The block reads SCALE, which the
script changes between forward and backward, so every watched replay diverges."""
import functools
import sys

import torch
import torch.nn as nn
from torch.distributed._composable import checkpoint as composable_checkpoint
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from _common import report

SCALE = 1.0
REENTRANT = "reentrant" in sys.argv[1:]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # ckpt-target: B Block.forward
        return torch.tanh(self.lin(x) * SCALE)


class GradientCheckpointingLayer(nn.Module):
    """What transformers' modeling_layers.GradientCheckpointingLayer does."""

    gradient_checkpointing = False

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            return self._gradient_checkpointing_func(
                functools.partial(super().__call__, **kwargs), *args)
        return super().__call__(*args, **kwargs)


class HFLayer(GradientCheckpointingLayer):  # ckpt-site: H
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # ckpt-target: H HFLayer.forward
        return torch.sin(self.lin(x) * SCALE)


def run(label, fn):
    global SCALE
    SCALE = 1.0
    x = torch.randn(2, 4, requires_grad=True)
    out = fn(x)
    SCALE = 2.0
    out.sum().backward()


torch.manual_seed(0)
ckpt = functools.partial(checkpoint, use_reentrant=REENTRANT)
run("partial", lambda x: ckpt(Block(), x))  # ckpt-site: P
run("sequential", lambda x: checkpoint_sequential(nn.Sequential(Block(), Block()), 2, x, use_reentrant=REENTRANT))  # ckpt-site: S
impl = CheckpointImpl.REENTRANT if REENTRANT else CheckpointImpl.NO_REENTRANT
wrapped = checkpoint_wrapper(Block(), checkpoint_impl=impl)  # ckpt-site: W
run("wrapper", wrapped)
model = nn.Sequential(Block())
apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=impl), check_fn=lambda m: isinstance(m, Block))  # ckpt-site: AAC
run("apply", model)
if not REENTRANT:
    run("composable", composable_checkpoint(Block()))
layer = HFLayer()
layer.gradient_checkpointing = True
layer._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=REENTRANT)
run("hf", layer)
report(done=True)
