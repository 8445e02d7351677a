"""Toy blocks whose saved activations are known analytically (float32, 2-D inputs).

`python toys.py SCENARIO... [--steps N]`, scenarios (each trains its own model):
  children  4 parents, each checkpointing its 3 children one by one
  parent    the same 4 parents, each checkpointed whole
  wrapper   the same 4 parents, each wrapped by apply_activation_checkpointing
  nothing   a checkpointed elementwise function (`x * 0.5`): it saves no tensor
  sac       a block under a selective-checkpoint policy that saves matmuls
  mlp       a matmul block with dropout, checkpointed without a policy (for --memory-budget)
  state     a block reading `self.scale`, which the training loop changes between forward
            and backward (a schedule stepped too early), reentrant and non-reentrant
With CKPT_TEST_OUT set, `sac` writes there, as JSON, what the same run counts itself with
`saved_tensors_hooks` (plain run) and with a dispatch mode (the policy's matmul outputs).
"""

import functools
import json
import os
import sys

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

N, D, H = 256, 64, 512          # rows, width, hidden width of the SAC block
FLOAT = 4


class Child(nn.Module):
    """Linear, gelu, Linear (width D): saves the gelu input and the second Linear's input,
    2 * N * D * 4 bytes, besides its own input."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, D)
        self.b = nn.Linear(D, D)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


class Parent(nn.Module):
    def __init__(self, wrap_children):
        super().__init__()
        self.wrap_children = wrap_children
        self.c1, self.c2, self.c3 = Child(), Child(), Child()

    def forward(self, x):
        for child in (self.c1, self.c2, self.c3):
            if self.wrap_children:
                x = checkpoint(child, x, use_reentrant=False)  # toy: children
            else:
                x = child(x)
        return x


class Stack(nn.Module):
    def __init__(self, wrap_children):
        super().__init__()
        self.parents = nn.ModuleList(Parent(wrap_children) for _ in range(4))
        self.wrap_children = wrap_children

    def forward(self, x):
        for parent in self.parents:
            x = parent(x) if self.wrap_children else \
                checkpoint(parent, x, use_reentrant=False)  # toy: parent
        return x


def wrapped(model):
    """Each Parent wrapped in place by torch's checkpoint_wrapper (the children are not
    checkpointed themselves)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing)
    for parent in model.parents:
        parent.wrap_children = False
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Parent))  # toy: wrapper
    return model


def halve(x):
    return x * 0.5


class Halving(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x):
        return checkpoint(halve, self.lin(x), use_reentrant=False)  # toy: nothing


class MatmulBlock(nn.Module):
    """mm (D -> H), gelu, mm (H -> D): a plain run saves the gelu input and the second mm's
    input (2 * N * H * 4 bytes); a policy saving matmuls keeps both mm outputs instead
    (N * H * 4 + N * D * 4)."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(D, H) / D ** 0.5)
        self.w2 = nn.Parameter(torch.randn(H, D) / H ** 0.5)

    def forward(self, x):
        return torch.mm(torch.nn.functional.gelu(torch.mm(x, self.w1)), self.w2)


def save_matmuls(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy     # torch 2.5 and newer
    if op == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


class Selective(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MatmulBlock()

    def forward(self, x):
        from torch.utils.checkpoint import create_selective_checkpoint_contexts
        context = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
        return checkpoint(self.block, x, use_reentrant=False, context_fn=context)  # toy: sac


class NoisyMatmul(MatmulBlock):
    def forward(self, x):
        return torch.nn.functional.dropout(super().forward(x), 0.1, self.training)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = NoisyMatmul()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)  # toy: mlp


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.scale = 1.0

    def forward(self, x):
        # tanh saves its output, which the replay recomputes with the scale of that moment
        return torch.tanh(self.lin(x) * self.scale)


class StateBug(nn.Module):
    def __init__(self):
        super().__init__()
        self.reentrant, self.plain = Scaled(), Scaled()

    def forward(self, x):
        a = checkpoint(self.reentrant, x, use_reentrant=True)  # toy: state reentrant
        b = checkpoint(self.plain, x, use_reentrant=False)  # toy: state non-reentrant
        return a + b


def expected_sac(model, x) -> dict:
    """What this run counts itself: storages a plain run saves for backward (inputs and
    parameters left out), and the storages of the matmul outputs the policy keeps."""
    from torch.utils._python_dispatch import TorchDispatchMode

    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), t)
        return t

    class MatmulOutputs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.kept = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func == torch.ops.aten.mm.default:
                self.kept[out.untyped_storage().data_ptr()] = (out.untyped_storage().nbytes(), out)
            return out

    held = {t.untyped_storage().data_ptr() for t in [x, *model.parameters()]}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.block(x)
    with MatmulOutputs() as mode:
        model.block(x)
    return {"plain_saved": sum(n for p, (n, _) in saved.items() if p not in held),
            "policy_kept": sum(n for n, _ in mode.kept.values())}


def train(model, steps, before_backward=None):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randn(N, D, requires_grad=True)
        loss = model(x).pow(2).mean()
        if before_backward is not None:
            before_backward(model)
        opt.zero_grad()
        loss.backward()
        opt.step()


def warm_up_schedule(model):
    # the training loop steps a schedule between forward and backward: the replays see it
    model.reentrant.scale = model.plain.scale = model.reentrant.scale + 1.0


def main():
    scenarios = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 2
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in scenarios:
        if name == "children":
            train(Stack(wrap_children=True), steps)
        elif name == "parent":
            train(Stack(wrap_children=False), steps)
        elif name == "wrapper":
            train(wrapped(Stack(wrap_children=True)), steps)
        elif name == "nothing":
            train(Halving(), steps)
        elif name == "sac":
            model = Selective()
            out = os.environ.get("CKPT_TEST_OUT")
            if out:
                with open(out, "w") as handle:
                    json.dump(expected_sac(model, torch.randn(N, D, requires_grad=True)), handle)
            train(model, steps)
        elif name == "mlp":
            train(Plain(), steps)
        elif name == "mlp-once":
            # a command that breaks when run again (the marker file is left by its first run)
            marker = os.environ["CKPT_TEST_MARKER"]
            if os.path.exists(marker):
                sys.exit("refusing a second run")
            open(marker, "w").close()
            train(Plain(), steps)
        elif name == "state":
            train(StateBug(), steps, before_backward=warm_up_schedule)


if __name__ == "__main__":
    main()
