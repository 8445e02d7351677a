"""Drives the profile observer's CUDA path on CPU: torch.cuda.Event is replaced by a fake whose
query() says "not yet" once, so results are deferred and resolved later (or at flush), and
every call is treated as a CUDA call. Writes the events to argv[1]."""
import os
import sys
import time

import torch
# torch 2.4's dynamo (loaded by the first checkpoint call) checks, when it loads, that
# torch.cuda.Event derives from its event base class: load it before the fake replaces it.
import torch._dynamo  # noqa: F401
from torch.utils.checkpoint import checkpoint

from ckptlint.dynamic.profile import observer as profile_observer
from ckptlint.dynamic.watch import torch_adapter
from ckptlint.dynamic.watch.observer import add_observer


class FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = None
        self.asked = 0

    def record(self, stream=None):
        self.t = time.perf_counter()

    def query(self):
        self.asked += 1
        return self.asked > 1

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


torch.cuda.Event = FakeEvent
_init = profile_observer._CallState.__init__


def _cuda_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.cuda = True


profile_observer._CallState.__init__ = _cuda_init
os.environ["CKPTLINT_PROFILE_OUT"] = sys.argv[1]
torch_adapter.install()
obs = profile_observer.ProfileObserver()
add_observer(obs)

torch.manual_seed(0)
lin = torch.nn.Linear(64, 64)
drop = torch.nn.Dropout(0.5)
for step in range(3):
    x = torch.randn(8, 64, requires_grad=True)
    y = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=False)  # clean
    z = checkpoint(lambda t: drop(t) * 2, y, use_reentrant=False, preserve_rng_state=False)
    z.sum().backward()
print("PENDING", len(obs.pending))
obs.flush()
print("PENDING", len(obs.pending))
