"""CKP104: two `gradient_checkpointing_enable()` calls in one script, a tiny Llama built from
its config. The first runs (asking for reentrant checkpointing, as transformers before 5.0 did
by default); the second is in a branch that never runs. Ground truth: gradients with and
without checkpointing."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _common import report


def build():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config)


def gradients(model):
    model.train()
    ids = (torch.arange(12) * 5 % 64).unsqueeze(0)
    model(input_ids=ids, labels=ids).loss.backward()
    return [round(float(p.grad.abs().sum()), 9) for p in model.parameters() if p.grad is not None]


plain = gradients(build())
model = build()
reentrant = {"use_reentrant": True}
if "never" in sys.argv:
    model.gradient_checkpointing_enable()  # ckpt-site: N  ckpt-finding: CKP104 N
else:
    model.gradient_checkpointing_enable(reentrant)  # ckpt-site: R  ckpt-finding: CKP104 R
report(plain=plain, ckpt=gradients(model))
