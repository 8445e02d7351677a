"""CKP301: checkpointed code moves tensors to a device whose RNG state was not saved."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.hazards import keyword, random_call, random_module_call
from ckptlint.analysis.scopes import ASSIGNED, BindingKind, Scope
from ckptlint.analysis.segment import Segment, import_qualnames
from ckptlint.checks.phrases import TORCH_DRAW_PHRASES
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding

SAFE_DEVICE_STRINGS = ("cpu", "meta")


class DeviceMoveInSegment(SegmentRule):
    code = "CKP301"
    message = ("checkpointed code moves tensors to `{device:short}`: checkpoint saved the RNG "
               "state of the CPU and of the inputs' device only, so randomness on another "
               "device is not restored for the replay; {draws_random:phrase}")
    phrases = {
        "draws_random": {
            True: "this segment draws random numbers ({draw:phrase} at {rng_at:at}), so its "
                  "replay on that device draws different ones",
            False: "it draws no random numbers today, so the replay only repeats the transfer, "
                   "until someone adds dropout after the move",
        },
        "draw": TORCH_DRAW_PHRASES,
    }

    def check(self, segment: Segment) -> Iterator[Finding]:
        randomness = None
        for reached, facts in self.functions(segment):
            for call in facts.calls:
                target = self.move_target(call.node, call.scope, callee=reached.depth > 0)
                if target is None:
                    continue
                if randomness is None:
                    randomness = self.randomness(segment)
                device = (source_text(reached.module, target) if isinstance(target, cst.CSTNode)
                          else target)
                yield self.at(segment, reached, call.node, {"device": device, **randomness})

    def randomness(self, segment: Segment) -> dict:
        """The first random draw of the segment as data (`draws_random`, and what and where)."""
        resolver = self.context.resolver
        for reached, facts in self.functions(segment):
            for call in facts.calls:
                found = random_call(call.node, call.scope) or random_module_call(
                    resolver, call.node, reached.module, call.scope, reached.function.owner)
                if found:
                    return {"draws_random": True, **found.data(),
                            "rng_at": {"filename": reached.module.display,
                                       "row": reached.module.start(call.node).row}}
        return {"draws_random": False}

    def move_target(self, call: cst.Call, scope: Scope, *, callee: bool):
        """The device expression a call moves to, when it is a non-CPU device not of an input.

        `callee`: the call is in a function the target calls, not in the target itself."""
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver_names = import_qualnames(func.value, scope)
            if receiver_names:
                # `torch.cuda(...)`-like module functions; factories are handled below.
                pass
            elif method == "cuda":
                return "cuda"
            elif method == "to":
                device = keyword(call, "device")
                named = device is not None
                if device is None:
                    positional = [a.value for a in call.args if a.keyword is None and not a.star]
                    device = positional[0] if positional else None
                if device is not None and self.is_foreign_device(device, scope, named=named,
                                                                 callee=callee):
                    return device
                return None
            elif method.startswith("new_"):
                device = keyword(call, "device")
                if device is not None and self.is_foreign_device(device, scope, named=True,
                                                                 callee=callee):
                    return device
                return None
        names = import_qualnames(func, scope)
        if any(n.startswith("torch.") and n.count(".") == 1 and n[6:7].islower() for n in names):
            device = keyword(call, "device")
            if device is not None and self.is_foreign_device(device, scope, named=True,
                                                             callee=callee):
                return device
        return None

    def is_foreign_device(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0,
                          named: bool = False, *, callee: bool) -> bool:
        """A device other than the CPU and not taken from a tensor (`x.device` is fine).

        `named`: passed as `device=...`, so any variable there is a device (elsewhere, only
        device-named variables are: `.to(other)` takes the dtype and device of a tensor).
        """
        if depth > 4:
            return False
        if isinstance(expr, cst.SimpleString):
            value = expr.evaluated_value
            if not isinstance(value, str):
                return False
            return not value.startswith(SAFE_DEVICE_STRINGS) and looks_like_device(value)
        if isinstance(expr, cst.Call):
            names = import_qualnames(expr.func, scope)
            if "torch.device" in names and expr.args:
                return self.is_foreign_device(expr.args[0].value, scope, depth + 1, callee=callee)
            return False
        if isinstance(expr, cst.Attribute):
            attr = expr.attr.value
            return "device" in attr and attr != "device" and not attr.startswith("_")
        if isinstance(expr, cst.Name):
            if "device" not in expr.value.lower() and not named:
                return False
            bindings = scope.lookup(expr.value)
            if not bindings:
                return False
            for binding in bindings:
                if binding.kind == BindingKind.PARAM:
                    if callee:
                        return False  # a helper's `device` parameter: the caller's choice
                elif binding.kind in ASSIGNED and binding.value is not None:
                    if not self.is_foreign_device(binding.value, binding.scope, depth + 1,
                                                  named=True, callee=callee):
                        return False
                else:
                    return False  # imports, loop variables, ...: unknown
            return True
        if isinstance(expr, cst.IfExp):
            return (self.is_foreign_device(expr.body, scope, depth + 1, named, callee=callee)
                    or self.is_foreign_device(expr.orelse, scope, depth + 1, named, callee=callee))
        return False


def looks_like_device(value: str) -> bool:
    head = value.split(":", 1)[0]
    return head in ("cuda", "xpu", "mps", "hpu", "npu", "xla", "privateuseone", "mtia", "ipu")
