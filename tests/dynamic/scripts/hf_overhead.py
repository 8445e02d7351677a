"""Step time of a tiny GPT-2 (built from its config, never downloaded) trained with
activation checkpointing on every layer; prints seconds per step (watched or not)."""
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
config = GPT2Config(vocab_size=256, n_positions=64, n_embd=128, n_layer=4, n_head=4)
model = GPT2LMHeadModel(config)
model.gradient_checkpointing_enable()
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 256, (4, 64))


def step():
    loss = model(input_ids=ids, labels=ids).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


for _ in range(2):
    step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(steps):
    step()
print(f"STEP_SECONDS {(time.perf_counter() - t0) / steps:.6f} "
      f"CPU {(time.process_time() - c0) / steps:.6f}")
