"""A few steps of training with a checkpointed block and no checkpoint error."""
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
layer = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(4, 8)
    loss = checkpoint(layer, x, use_reentrant=False).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
