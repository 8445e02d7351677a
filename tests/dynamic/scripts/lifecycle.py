"""Unexercised sites, forward without backward, a crash before the first step, and
nondeterminism that only --replay-now can see (eval-only)."""
import random
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import report

ARGS = sys.argv[1:]
random.seed(0)
torch.manual_seed(0)


def never_called(x):  # ckpt-target: N never_called
    return torch.tanh(x * random.random())  # ckpt-finding: CKP303 N


def scored(x):  # ckpt-target: E scored
    return torch.sin(x * random.random())  # ckpt-finding: CKP303 E


def unused():
    return checkpoint(never_called, torch.ones(2, requires_grad=True), use_reentrant=False)  # ckpt-site: N


if "crash" in ARGS:
    raise RuntimeError("config file missing: crashed before the first step")

x = torch.ones(3, requires_grad=True)
if "no-grad" in ARGS:
    with torch.no_grad():
        out = checkpoint(scored, x, use_reentrant=False)  # ckpt-site: E
else:
    out = checkpoint(scored, x, use_reentrant=False)  # ckpt-site: E
report(value=out.sum().item(), rand=torch.rand(2).tolist(), py=random.random())
if "fail" in ARGS:
    sys.exit(3)
