"""The hooks change nothing torch does: with the adapter installed (and no observer), nested
checkpoints and selective checkpointing (where this torch has it) give the plain gradients and
raise no warning about saved-tensor hooks. Torch 2.14 tells its own saved-tensor hooks from the
user's by a marker on the pack function; a hook that dropped it would make selective
checkpointing warn that a user's hook is active (and route its tensors through checkpoint's).
Torch's other warnings (2.4's `torch.cpu.amp.autocast` deprecation) are not this script's."""
import functools
import warnings

import torch

from ckptlint.dynamic.watch import torch_adapter

torch_adapter.install()
import torch.utils.checkpoint as cp  # noqa: E402

from _common import report  # noqa: E402

warnings.filterwarnings("error", message=".*saved_tensors_hooks")
torch.manual_seed(0)
weight = torch.randn(8, 8, requires_grad=True)


def block(x):
    return torch.tanh(torch.mm(x, weight)).sin() * 2


def grads(run):
    weight.grad = None
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    run(x).sum().backward()
    return [x.grad.tolist(), weight.grad.tolist()]


def save_mm(ctx, op, *args, **kwargs):
    return cp.CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default \
        else cp.CheckpointPolicy.PREFER_RECOMPUTE


plain = grads(block)
same = {"nested": grads(lambda x: cp.checkpoint(
    lambda y: cp.checkpoint(block, y, use_reentrant=False), x, use_reentrant=False)) == plain,
        "reentrant": grads(lambda x: cp.checkpoint(block, x, use_reentrant=True)) == plain}
if hasattr(cp, "create_selective_checkpoint_contexts"):
    sac = functools.partial(cp.create_selective_checkpoint_contexts, save_mm)
    same["selective"] = grads(
        lambda x: cp.checkpoint(block, x, use_reentrant=False, context_fn=sac)) == plain
report(same=same, installed=torch_adapter.FEATURES)
