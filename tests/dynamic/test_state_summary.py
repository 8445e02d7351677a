"""How the state a finding names is summarised around each pass (real torch, in process)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ckptlint.dynamic.observations import unreadable  # noqa: E402
from ckptlint.dynamic.watch.state import (CONTAINER_TENSOR_ELEMENTS, CONTAINER_VALUES,  # noqa: E402
                                          summarize)


def test_container_summaries_change_with_their_contents():
    threshold = [1.0]
    before = summarize(threshold)
    threshold[0] = 0.5
    assert (before, summarize(threshold)) == ("list [1.0]", "list [0.5]")
    config = {"scale": 1.0, "name": "block"}
    before = summarize(config)
    config["scale"] = 0.5
    assert summarize(config) != before and "'scale': 0.5" in summarize(config)
    assert summarize({"b": 1, "a": 2}) == summarize({"a": 2, "b": 1})  # order is not content


def test_long_contents_and_tensors_are_digested():
    weights = [torch.ones(3), (1, 2), {"key": list(range(20))}]
    before = summarize(weights)
    assert before.startswith("list of length 3 #")
    weights[0][1] = 2.0  # in place: the list and the tensor keep their identity
    assert summarize(weights) != before
    weights[0][1] = 1.0
    assert summarize(weights) == before


def test_what_cannot_be_read_in_full_says_so():
    class Opaque:
        pass

    too_many = list(range(CONTAINER_VALUES + 1))
    nested = [[[[[1]]]]]
    for value, reason in ((too_many, f"more than {CONTAINER_VALUES} values"),
                          (nested, "nested more than"), ([Opaque()], "holds a Opaque"),
                          ([torch.zeros(CONTAINER_TENSOR_ELEMENTS + 1, dtype=torch.uint8)],
                           "tensors of more than")):
        text = summarize(value)
        assert unreadable(text) and reason in text, text
    assert not unreadable(summarize(list(range(CONTAINER_VALUES))))
