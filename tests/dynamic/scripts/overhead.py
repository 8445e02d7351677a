"""Step time of a small checkpointed MLP; prints seconds per step (watched or not). Its
markers give measure_overhead.py findings whose lines are traced (a counter, a branch)."""
import sys
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
width = int(sys.argv[2]) if len(sys.argv) > 2 else 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.residual = True
        self.calls = 0

    def forward(self, x):  # ckpt-target: O Block.forward
        self.calls += 1  # ckpt-finding: CKP401 O self.calls
        h = self.b(torch.relu(self.a(x)))
        if self.residual:  # ckpt-finding: CKP204 O self.residual
            h = x + h
        return h


blocks = nn.ModuleList(Block() for _ in range(4))
opt = torch.optim.SGD(blocks.parameters(), lr=1e-3)
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
x = torch.randn(batch, width)


def step():
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False)  # ckpt-site: O
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(3):
    step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(steps):
    step()
# CPU time is the steadier figure on a loaded machine (one torch thread).
print(f"STEP_SECONDS {(time.perf_counter() - t0) / steps:.6f} "
      f"CPU {(time.process_time() - c0) / steps:.6f}")
