"""CKP303: Python `random`, NumPy random or a user `torch.Generator` inside a segment."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.hazards import Draw, foreign_random_call, keyword
from ckptlint.analysis.scopes import BindingKind, Scope, ScopeKind
from ckptlint.analysis.segment import FunctionFacts, Segment, import_qualnames
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding


class ForeignRng(SegmentRule):
    code = "CKP303"
    message = ("checkpointed code draws from {draw:phrase}; checkpoint saves and restores only "
               "torch's default generators, so the replay draws different numbers")
    phrases = {
        "draw": {
            "python": "Python's `{rng}`",
            "numpy": "NumPy's global generator (`{rng}`)",
            "factory": "an unseeded {rng:phrase}",
            "generator": "the generator `{rng:short}`, a `torch.Generator`",
        },
        # Generators made in place (`draw` "factory").
        "rng": {
            "random.Random": "Python `random.Random`",
            "numpy.random.default_rng": "NumPy `default_rng`",
            "numpy.random.RandomState": "NumPy `RandomState`",
            "numpy.random.Generator": "NumPy `Generator`",
        },
    }

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for call in facts.calls:
                found = foreign_random_call(call.node, call.scope)
                if found is None:
                    generator = keyword(call.node, "generator")
                    if generator is not None and not is_none(generator) and not self.seeded_here(
                            generator, call.scope, facts):
                        found = Draw(source_text(reached.module, generator), "generator")
                if found is None:
                    continue
                yield self.at(segment, reached, call.node, found.data())

    def seeded_here(self, expr: cst.BaseExpression, scope: Scope, facts: FunctionFacts) -> bool:
        """A generator created in this function and seeded here: the replay reseeds it. Also
        a parameter that defaults to None (`generator=None`, as in `torch.nn.init`): usually
        not given, and then torch's default generator is used, which checkpoint restores."""
        if isinstance(expr, cst.Call):
            return is_seeded_generator_expr(expr, scope)
        if not isinstance(expr, cst.Name):
            return False
        bindings = scope.lookup(expr.value)
        if not bindings or bindings[0].scope.kind == ScopeKind.MODULE:
            return False
        if len(bindings) == 1 and bindings[0].kind == BindingKind.PARAM:
            default = getattr(bindings[0].node, "default", None)
            return isinstance(default, cst.Name) and default.value == "None"
        for binding in bindings:
            if binding.kind != BindingKind.ASSIGN or not isinstance(binding.value, cst.Call):
                return False
            if is_seeded_generator_expr(binding.value, binding.scope):
                continue
            if not is_generator_factory(binding.value, binding.scope):
                return False
            if not any(isinstance(c.node.func, cst.Attribute)
                       and c.node.func.attr.value == "manual_seed"
                       and isinstance(c.node.func.value, cst.Name)
                       and c.node.func.value.value == expr.value for c in facts.calls):
                return False
        return True


def is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def is_generator_factory(call: cst.Call, scope: Scope) -> bool:
    return any(n.startswith("torch") and n.endswith(".Generator")
               for n in import_qualnames(call.func, scope))


def is_seeded_generator_expr(call: cst.Call, scope: Scope) -> bool:
    """`torch.Generator(...).manual_seed(...)`."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "manual_seed"
            and isinstance(func.value, cst.Call) and is_generator_factory(func.value, scope)
            and bool(call.args))
