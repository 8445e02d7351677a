"""CKP201 on a module-level instance of a project class read in the segment (`CFG.scale`):
its attribute is assigned between forward and backward (`changed`) or left alone
(`unchanged`). The object keeps its identity: only an attribute's value changes."""
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import grads, report

MODE = sys.argv[1]


class Config:
    def __init__(self):
        self.scale = 1.0
        self.name = "block"


CFG = Config()


def block(x, w):  # ckpt-target: A block
    return torch.tanh(x @ w * CFG.scale)  # ckpt-finding: CKP201 A CFG


def step(use_ckpt):
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    CFG.scale = 1.0
    if use_ckpt:
        out = checkpoint(block, x, w, use_reentrant=False)  # ckpt-site: A
    else:
        out = block(x, w)
    if MODE == "changed":
        CFG.scale = 0.5
    out.sum().backward()
    return grads(x, w)


plain = step(False)
report(plain=plain, ckpt=step(True))
