"""An observer as `profile` would write one: activation bytes from what the replay packs."""

import json
import os

from ckptlint.dynamic.watch.observer import Observer


class BytesObserver(Observer):
    def __init__(self, path):
        self.path = path

    def call_started(self, call):
        call.scratch["bytes"] = 0
        call.scratch["storages"] = set()
        call.scratch["n_args"] = len(call.args)

    def tensor_saved(self, call, phase, index, tensor):
        if phase != "replay":
            return
        key = tensor.untyped_storage().data_ptr()
        if key in call.input_storages or key in call.scratch["storages"]:
            return
        module = getattr(call.fn, "parameters", None)
        params = {p.untyped_storage().data_ptr() for p in module()} if module else set()
        if key in params:
            return
        call.scratch["storages"].add(key)
        call.scratch["bytes"] += tensor.untyped_storage().nbytes()

    def pass_ended(self, call, phase, info):
        if phase == "replay":
            with open(self.path, "a") as handle:
                handle.write(json.dumps({"site": call.site, "bytes": call.scratch["bytes"],
                                         "seconds": info.seconds, "args": call.scratch["n_args"],
                                         "early_stop": info.early_stopped}) + "\n")


def make():
    return BytesObserver(os.environ["PROBE_OUT"])
