"""DDP or FSDP2 under `torchrun --nproc_per_node 2` (gloo, CPU). Two checkpointed blocks per
step: A reads SCALE, which rank 1 changes between forward and backward (harmful there only);
B reads GAIN, which nothing changes. Ground truth per rank: the input's gradient (computed on
that rank alone) with and without checkpointing; one more step runs the real synchronised
update."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from _common import local_values, report

SCALE = 1.0
GAIN = 1.0


class BlockA(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):  # ckpt-target: A BlockA.forward
        return torch.tanh(self.lin(x) * SCALE)  # ckpt-finding: CKP201 A SCALE


class BlockB(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):  # ckpt-target: B BlockB.forward
        return torch.sin(self.lin(x) * GAIN)  # ckpt-finding: CKP201 B GAIN


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = BlockA()
        self.b = BlockB()

    def forward(self, x, use_ckpt):
        h = checkpoint(self.a, x, use_reentrant=False) if use_ckpt else self.a(x)  # ckpt-site: A
        return checkpoint(self.b, h, use_reentrant=False) if use_ckpt else self.b(h)  # ckpt-site: B


def input_gradient(model, rank, use_ckpt, harmful):
    global SCALE
    SCALE = 1.0
    torch.manual_seed(10 + rank)
    x = torch.randn(4, 8, requires_grad=True)
    out = model(x, use_ckpt)
    if harmful:
        SCALE = 3.0
    out.sum().backward()
    SCALE = 1.0
    model.zero_grad()
    return local_values(x.grad)


def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(net)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        fully_shard(net.a, mesh=mesh)
        fully_shard(net.b, mesh=mesh)
        model = fully_shard(net, mesh=mesh)
    harmful = rank == 1
    plain = input_gradient(model, rank, False, harmful)
    ckpt = input_gradient(model, rank, True, harmful)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 8), True).sum().backward()
    optimizer.step()
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, {"rank": rank, "differs": plain != ckpt})
    if rank == 0:
        report(ranks=results)
    dist.destroy_process_group()


main()
