"""Dynamic mode: watch each checkpoint's real forward and replay.

The parent side (`cli`, `runner`, `verdicts`, `join`, `bootstrap`) never imports torch; the
watched process's side is `watch/` (`torch_adapter`, `recorder`, `state`, `digest` and
`child` import torch there; `compare` and `observer` do not), and `profile/` builds on both.
"""
