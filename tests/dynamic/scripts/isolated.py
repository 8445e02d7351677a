"""CKP201 (as state_read.py), self-contained: `python -I` puts neither PYTHONPATH nor the
script's folder on sys.path."""
import json
import os

import torch
from torch.utils.checkpoint import checkpoint

SCALE = 1.0


def block(x):  # ckpt-target: A block
    return torch.tanh(x * SCALE)  # ckpt-finding: CKP201 A SCALE


x = torch.ones(3, requires_grad=True)
checkpoint(block, x, use_reentrant=False).sum().backward()  # ckpt-site: A
with open(os.environ["CKPT_TEST_OUT"], "w") as handle:
    json.dump({"grad": x.grad.tolist()}, handle)
