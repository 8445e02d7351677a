"""CKP301: a device move inside the segment. On CPU the move is to the CPU and harmless
(cleared); on a CUDA machine the dropout after the move draws from a CUDA generator the
checkpoint did not save (CPU inputs), so the replay differs (confirmed)."""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from _common import grads, report

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def block(x, w):  # ckpt-target: A block
    h = (x @ w).to(DEVICE)  # ckpt-finding: CKP301 A
    return torch.tanh(F.dropout(h, 0.5, training=True)).cpu()


def step(use_ckpt):
    torch.manual_seed(0)
    if DEVICE == "cuda":
        torch.cuda.manual_seed(0)
        torch.zeros(1, device="cuda")   # initialise CUDA before the checkpoint
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    out = checkpoint(block, x, w, use_reentrant=False) if use_ckpt else block(x, w)  # ckpt-site: A
    out.sum().backward()
    return grads(x, w)


report(plain=step(False), ckpt=step(True), device=DEVICE)
