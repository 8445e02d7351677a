"""A key/value cache appended inside the segment: the replay appends again, and the saved
keys have twice the sequence length (non-reentrant checkpoint, metadata CheckpointError)."""
import torch
from torch.utils.checkpoint import checkpoint

cache = []


def attention_step(query, key):
    cache.append(key)
    keys = torch.cat(cache, dim=1)
    return torch.sin(query @ keys)


query = torch.randn(2, 4, requires_grad=True)
key = torch.randn(4, 6, requires_grad=True)
out = checkpoint(attention_step, query, key, use_reentrant=False)
out.sum().backward()
