"""Shared helpers for the dynamic-mode test scripts (each script is a tiny training run)."""

import json
import os
import sys

import torch

torch.set_default_dtype(torch.float64)
ARGS = set(sys.argv[1:])
HARMFUL = "harmless" not in ARGS
REENTRANT = "reentrant" in ARGS


def grads(*tensors):
    return [None if t.grad is None else [round(v, 12) for v in t.grad.flatten().tolist()]
            for t in tensors]


def local_values(tensor):
    """This process's part of a tensor (its shard, for a sharded one), rounded."""
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return [round(v, 12) for v in tensor.flatten().tolist()]


def report(**values):
    path = os.environ.get("CKPT_TEST_OUT")
    if path:
        with open(path, "w") as handle:
            json.dump(values, handle)
