"""CKP201 on module-level containers read in the segment: a list whose item is assigned
between forward and backward (`list`), left alone (`unchanged`), or a dict whose value is
assigned (`dict`). Only the contents change: the container keeps its identity and length."""
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import grads, report

MODE = sys.argv[1]
THRESHOLD = [1.0]
CONFIG = {"scale": 1.0, "name": "block"}


def list_block(x, w):  # ckpt-target: L list_block
    return torch.tanh(x @ w * THRESHOLD[0])  # ckpt-finding: CKP201 L THRESHOLD


def dict_block(x, w):  # ckpt-target: D dict_block
    return torch.tanh(x @ w * CONFIG["scale"])  # ckpt-finding: CKP201 D CONFIG


def step(use_ckpt):
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    THRESHOLD[0] = 1.0
    CONFIG["scale"] = 1.0
    block = dict_block if MODE == "dict" else list_block
    if use_ckpt:
        if MODE == "dict":
            out = checkpoint(block, x, w, use_reentrant=False)  # ckpt-site: D
        else:
            out = checkpoint(block, x, w, use_reentrant=False)  # ckpt-site: L
    else:
        out = block(x, w)
    if MODE == "list":
        THRESHOLD[0] = 0.5
    elif MODE == "dict":
        CONFIG["scale"] = 0.5
    out.sum().backward()
    return grads(x, w)


plain = step(False)
report(plain=plain, ckpt=step(True))
