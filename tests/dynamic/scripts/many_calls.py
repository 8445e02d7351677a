"""CALLS calls of one tiny checkpointed segment, each with its own backward (the watcher's
disk and memory budget). With DIVERGE_AT, that one call's global changes between forward and
backward (after the recorder stopped writing every call). Ground truth from gradients."""
import sys

import torch
from torch.utils.checkpoint import checkpoint

from _common import report

torch.set_num_threads(1)
SCALE = 1.0


def block(x):  # ckpt-target: M block
    return torch.tanh(x * SCALE)  # ckpt-finding: CKP201 M SCALE


calls = int(sys.argv[1])
diverge_at = int(sys.argv[2]) if len(sys.argv) > 2 else 0
x = torch.ones(4, requires_grad=True)
plain = torch.autograd.grad(torch.tanh(x).sum(), x)[0]
wrong = []
for i in range(1, calls + 1):
    SCALE = 1.0
    out = checkpoint(block, x, use_reentrant=False)  # ckpt-site: M
    if i == diverge_at:
        SCALE = 2.0
    (grad,) = torch.autograd.grad(out.sum(), x)
    if not torch.equal(grad, plain):
        wrong.append(i)
report(calls=calls, wrong=wrong)
