"""A small encoder: a big checkpointed feed-forward block and a trivial elementwise segment.

`python encoder.py [STEPS] [dropout] [reentrant] [--timing]`: trains a few steps. With
`dropout`, a third segment runs dropout under `preserve_rng_state=False` (its replay draws a
new mask); with `reentrant`, every checkpoint is reentrant.
`build()` and the segment functions are imported by the tests for the expected numbers.
"""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

BATCH, LENGTH, DIM, HIDDEN = 4, 64, 128, 2048


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)
        self.aux = []

    def forward(self, x):
        h = self.up(x)
        # a side effect, like an MoE load-balancing loss: --grad-check must put the list back
        self.aux.append(h.pow(2).mean())
        return self.down(torch.nn.functional.gelu(h))


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.proj(self.drop(x))


def squash(h):
    return torch.tanh(h)


class Encoder(nn.Module):
    def __init__(self, dropout=False, reentrant=False):
        super().__init__()
        self.reentrant = reentrant
        self.embed = nn.Linear(DIM, DIM)
        self.ff = FeedForward()
        self.noisy = Noisy() if dropout else None
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        h = self.embed(x)
        h = h + checkpoint(self.ff, h, use_reentrant=self.reentrant)  # profile: ff
        pooled = h.mean(1)
        pooled = checkpoint(squash, pooled, use_reentrant=self.reentrant)  # profile: squash
        if self.noisy is not None:
            pooled = checkpoint(self.noisy, pooled, use_reentrant=self.reentrant,  # profile: noisy
                                preserve_rng_state=False)
        return self.head(pooled)


def build(dropout=False, reentrant=False):
    torch.manual_seed(0)
    return Encoder(dropout, reentrant)


def batch():
    return torch.randn(BATCH, LENGTH, DIM)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 3
    torch.set_num_threads(1)
    model = build(dropout="dropout" in args, reentrant="reentrant" in args)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for step in range(steps):
        t0 = time.process_time()
        model.ff.aux.clear()
        loss = model(batch()).pow(2).mean() + 1e-3 * sum(model.ff.aux)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.process_time() - t0)  # CPU time: robust to other load
    if "--timing" in sys.argv:
        warm = sorted(times[2:] or times)
        print(f"STEP_SECONDS {warm[len(warm) // 2]:.6f}")   # median: robust to a busy machine
    out = os.environ.get("CKPT_TEST_OUT")
    if out:
        with open(out, "w") as handle:
            handle.write(repr(float(loss)))


if __name__ == "__main__":
    main()
