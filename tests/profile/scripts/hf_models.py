"""Tiny transformers models built from configs, trained a few steps with activation
checkpointing enabled (no download: the weights are random).

`python hf_models.py MODEL [eval] [STEPS]`: MODEL is llama, gpt2, vit or all (the three, one
after the other). With `eval`, the model
is put in eval() mode before training (a common slip): transformers layers then never
checkpoint, although checkpointing is enabled.
`build(name)` and `batch(name)` are imported by the tests for the expected numbers.
"""

import sys

import torch

LAYERS, BATCH, LENGTH = 2, 2, 32


def build(name):
    import transformers as tf
    torch.manual_seed(0)
    if name == "llama":
        config = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                num_hidden_layers=LAYERS, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=64)
        return tf.LlamaForCausalLM(config)
    if name == "gpt2":
        config = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=LAYERS, n_head=4,
                               n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                               attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(config)
    config = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                          num_hidden_layers=LAYERS, num_attention_heads=4,
                          intermediate_size=128, num_labels=10)
    return tf.ViTForImageClassification(config)


def batch(name, generator=None):
    if name == "vit":
        return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=generator),
                "labels": torch.randint(0, 10, (BATCH,), generator=generator)}
    ids = torch.randint(0, 128, (BATCH, LENGTH), generator=generator)
    return {"input_ids": ids, "labels": ids}


def main():
    names = ("llama", "gpt2", "vit") if sys.argv[1] == "all" else (sys.argv[1],)
    steps = int(next((a for a in sys.argv[2:] if a.isdigit()), "2"))
    torch.set_num_threads(1)
    for name in names:
        train(name, steps, evaluating="eval" in sys.argv[2:])


def train(name, steps, evaluating):
    model = build(name)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if evaluating:
        model.eval()
    else:
        model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        loss = model(**batch(name, generator)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
