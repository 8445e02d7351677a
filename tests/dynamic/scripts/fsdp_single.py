"""FSDP2 (`fully_shard`) on a gloo process group of one: each block is sharded and then
checkpointed. FSDP's hooks unshard the parameters before the forward and keep books after it;
in the replay they do neither. Harmless: a sound run. Harmful: SCALE changes between forward
and backward."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint

from _common import HARMFUL, grads, local_values, report

SCALE = 1.0


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):  # ckpt-target: F Block.forward
        return torch.tanh(self.b(torch.relu(self.a(x))) * SCALE)  # ckpt-finding: CKP201 F SCALE


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x, use_ckpt):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)  # ckpt-site: F
        return x


def step(model, use_ckpt):
    global SCALE
    SCALE = 1.0
    model.zero_grad()
    torch.manual_seed(1)
    x = torch.randn(4, 8, requires_grad=True)
    out = model(x, use_ckpt)
    if HARMFUL:
        SCALE = 3.0
    out.sum().backward()
    return grads(x) + [local_values(p.grad) for p in model.parameters()]


store = tempfile.NamedTemporaryFile(delete=False)
dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
try:
    mesh = init_device_mesh("cpu", (1,))
    torch.manual_seed(0)
    model = Model()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    report(plain=step(model, False), ckpt=step(model, True))
finally:
    dist.destroy_process_group()
    os.unlink(store.name)
sys.exit(0)
