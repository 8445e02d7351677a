"""A reentrant checkpoint under DistributedDataParallel(find_unused_parameters=True), two CPU
ranks over gloo (run with `torchrun --nproc_per_node 2`): DDP's reducer sees the checkpointed
parameters ready twice."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.b(checkpoint(self.a, x, use_reentrant=True))


dist.init_process_group("gloo")
model = DistributedDataParallel(Model(), find_unused_parameters=True)
x = torch.randn(2, 4, requires_grad=True)
model(x).sum().backward()
dist.destroy_process_group()
