"""Trains the bundled models for a few steps on CPU: `python examples/train.py --steps 3`.

`ckptlint dynamic examples -- python examples/train.py` watches every checkpoint here.
Hazard: the stem is checkpointed with `checkpoint_sequential` without `use_reentrant`, so it
runs reentrant (torch only warns), and the audio gain is annealed between forward passes.
"""

import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from audio_encoder import AudioEncoder, set_gain  # noqa: E402
from transformer_block import Decoder  # noqa: E402


def stem(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim), nn.GELU())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)

    encoder = AudioEncoder(n_mels=16, dim=64)
    decoder = Decoder()
    projection = stem(64)
    parameters = [*encoder.parameters(), *decoder.parameters(), *projection.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=1e-3)

    for step in range(args.steps):
        features = torch.randn(4, 256, 16, requires_grad=True)
        tokens = torch.randint(0, 64, (4, 16))
        decoder.clear_aux_losses()
        encoded = encoder(features)
        encoded = checkpoint_sequential(projection, 2, encoded)
        logits = decoder(tokens) + encoded.mean(1, keepdim=True)[..., :32] @ decoder.head.weight.T
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        loss = loss + 0.01 * decoder.aux_loss()
        set_gain(1.0 - 0.1 * step)  # annealed after the forward pass, before backward
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        encoder.reset_cache()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
