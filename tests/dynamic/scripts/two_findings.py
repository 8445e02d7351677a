"""Several findings at one site, one real divergence. Site A: SCALE changes between forward
and backward (CKP201, harmful); the same segment reads the process id (CKP202) and branches on
tensor values that take the same way on replay (CKP203): neither caused the divergence.
Site B: a flag read in the segment (CKP204) flips, so the replay raises before it reaches the
read of GAIN (CKP201), which changed too but never got to matter."""
import os

import torch
from torch.utils.checkpoint import checkpoint

from _common import grads, report

SCALE = 1.0
GAIN = 1.0
STRICT = False


def block(x):  # ckpt-target: A block
    pid = os.getpid()  # ckpt-finding: CKP202 A
    h = torch.tanh(x * SCALE)  # ckpt-finding: CKP201 A SCALE
    if h.sum() > -100.0:  # ckpt-finding: CKP203 A
        h = h * 2
    else:
        h = h * 3
    return h + 0 * pid


def guarded(x):  # ckpt-target: B guarded
    if STRICT:  # ckpt-finding: CKP204 B STRICT
        raise RuntimeError("strict mode refuses the replay")
    return torch.sin(x * GAIN)  # ckpt-finding: CKP201 B GAIN


def step_a(use_ckpt):
    global SCALE
    SCALE = 1.0
    x = torch.linspace(-1, 1, 6, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)  # ckpt-site: A
    SCALE = 3.0
    out.sum().backward()
    return grads(x)


def step_b(use_ckpt):
    global GAIN, STRICT
    GAIN, STRICT = 1.0, False
    x = torch.linspace(-1, 1, 6, requires_grad=True)
    out = checkpoint(guarded, x, use_reentrant=False) if use_ckpt else guarded(x)  # ckpt-site: B
    GAIN, STRICT = 2.0, True
    try:
        out.sum().backward()
    except RuntimeError as error:
        return str(error)
    return grads(x)


report(plain=step_a(False), ckpt=step_a(True), plain_b=step_b(False), ckpt_b=step_b(True))
