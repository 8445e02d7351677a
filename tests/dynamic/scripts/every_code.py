"""Every code dynamic mode judges, each found by the static rules in this file and watched at
run time: the rewording test lints and watches it with the real engine (no markers).

CKP101, CKP102 and CKP103 are judged by the mode seen at run time, CKP201, CKP204 and CKP401
by the state and lines their data names, the others by comparing forward and replay;
`Scaled` diverges where no static finding explains it (CKP501)."""
import random
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from _common import report

SCALE = 1.0
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def set_scale(value):
    global SCALE
    SCALE = value


def scaled(x):
    return torch.tanh(x * SCALE)


def noisy(x):
    h = torch.sin(x + random.random())
    if h.sum() > 100:
        return torch.cos(h)
    return torch.tanh(h)


def moved(x):
    return torch.tanh(F.dropout(x.to(DEVICE), 0.5, training=True)).cpu()


def dropped(x):
    return torch.tanh(F.dropout(x, 0.5, training=True))


def plain(x, scale=1.0):
    return torch.tanh(x) * scale


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.use_tanh = True
        self.calls = 0

    def flip(self):
        self.use_tanh = not self.use_tanh

    def forward(self, x):
        self.calls += 1
        h = self.lin(x)
        if self.use_tanh:
            return torch.tanh(h)
        return torch.sigmoid(h)


class Config:
    logit_scale = 1.0


class Scaled(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x) * self.config.logit_scale)


def main():
    torch.manual_seed(0)
    random.seed(0)
    x = torch.randn(2, 4, requires_grad=True)

    out = checkpoint(scaled, x, use_reentrant=False)
    set_scale(3.0)
    out.sum().backward()

    checkpoint(noisy, x, use_reentrant=False).sum().backward()
    checkpoint(moved, x, use_reentrant=False).sum().backward()
    checkpoint(dropped, x, use_reentrant=False, preserve_rng_state=False).sum().backward()

    gate = Gate()
    out = checkpoint(gate, x, use_reentrant=False)
    gate.flip()
    out.sum().backward()

    checkpoint(plain, x, use_reentrant=True).sum().backward()
    checkpoint(plain, x).sum().backward()
    try:
        checkpoint(plain, x, use_reentrant=True, scale=2.0)
    except ValueError:
        traceback.print_exc()

    config = Config()
    block = Scaled(config)
    out = checkpoint(block, x, use_reentrant=False)
    config.logit_scale = 2.0
    out.sum().backward()
    report(calls=gate.calls)


main()
