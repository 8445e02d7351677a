"""Child-side entry: called by the generated sitecustomize once `torch` has been imported.

Environment (set by the parent, see runner.py):
  CKPTLINT_DYNAMIC_OUT         JSON-lines file the observations are appended to
  CKPTLINT_DYNAMIC_PLAN        JSON file with the state specs to watch (optional)
  CKPTLINT_DYNAMIC_REPLAY_NOW  "1" to rerun each segment right after its forward
"""

from __future__ import annotations

import json
import os
import sys

_done = False


def install() -> None:
    global _done
    if _done:
        return
    _done = True
    out = os.environ.get("CKPTLINT_DYNAMIC_OUT")
    extra = [name for name in os.environ.get("CKPTLINT_DYNAMIC_OBSERVERS", "").split(",") if name]
    if not out and not extra:
        return
    plan = {}
    plan_path = os.environ.get("CKPTLINT_DYNAMIC_PLAN")
    if plan_path:
        try:
            with open(plan_path, encoding="utf-8") as handle:
                plan = json.load(handle)
        except (OSError, ValueError):
            plan = {}
    try:
        from ckptlint.dynamic.watch import torch_adapter
        from ckptlint.dynamic.watch.observer import add_observer
        from ckptlint.dynamic.watch.recorder import Recorder, start_event
        features, errors = torch_adapter.install(
            replay_now=os.environ.get("CKPTLINT_DYNAMIC_REPLAY_NOW") == "1")
        if out and os.environ.get("CKPTLINT_DYNAMIC_RECORD", "1") != "0":
            recorder = Recorder(out, plan)
            add_observer(recorder)
            recorder.emit(start_event(features, errors))
        for name in extra:
            import importlib
            module_name, _, attr = name.partition(":")
            factory = getattr(importlib.import_module(module_name), attr or "observer")
            add_observer(factory())
    except Exception as exc:  # never break the user's program
        try:
            with open(out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"ev": "start", "pid": os.getpid(), "features": {},
                                         "errors": {"all": f"ckptlint watcher failed to "
                                                           f"install: {exc!r}"}}) + "\n")
        except OSError:
            pass
        print(f"ckptlint: watcher failed to install: {exc!r}", file=sys.stderr)
