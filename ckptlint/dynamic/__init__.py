"""Dynamic mode: watch each checkpoint's real forward and replay.

Only `torch_adapter`, `recorder`, `state` and `child` import torch, and only inside the
watched child process; `cli`, `runner`, `verdicts`, `compare`, `observer` and `bootstrap` do not.
"""
