"""How the state a finding names is summarised around each pass (real torch, in process)."""

from __future__ import annotations

import threading

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
    too_many = list(range(CONTAINER_VALUES + 1))
    nested = [[[[[1]]]]]
    for value, reason in ((too_many, f"more than {CONTAINER_VALUES} values"),
                          (nested, "nested more than"), ([threading.Lock()], "holds a lock"),
                          ([torch.zeros(CONTAINER_TENSOR_ELEMENTS + 1, dtype=torch.uint8)],
                           "tensors of more than")):
        text = summarize(value)
        assert unreadable(text) and reason in text, text
    assert not unreadable(summarize(list(range(CONTAINER_VALUES))))


class Config:
    def __init__(self, scale):
        self.scale = scale
        self.name = "block"


class Slotted:
    __slots__ = ("scale", "unset")

    def __init__(self, scale):
        self.scale = scale


def test_plain_objects_are_summarised_by_their_attributes():
    """An attribute assigned on an object that keeps its identity is a change; the summary
    names the attributes, not the object's address."""
    cfg = Config(1.0)
    before = summarize(cfg)
    assert before == "Config(name='block', scale=1.0)"
    cfg.scale = 0.5
    assert summarize(cfg) == "Config(name='block', scale=0.5)"
    assert summarize(Config(0.5)) == summarize(cfg)      # contents, not identity
    slotted = Slotted(1.0)
    before = summarize(slotted)
    slotted.scale = 2.0
    assert before == "Slotted(scale=1.0)" and summarize(slotted) == "Slotted(scale=2.0)"
    nested = Config([torch.ones(2)])
    before = summarize(nested)
    nested.scale[0].mul_(2)                              # a tensor inside, changed in place
    assert summarize(nested) != before and not unreadable(before)


def test_reading_an_object_runs_none_of_its_code():
    calls = []

    class Watched:
        def __init__(self):
            self.scale = 1.0

        def __getattribute__(self, name):
            if name != "__dict__":
                calls.append(name)
            return object.__getattribute__(self, name)

        def __eq__(self, other):
            calls.append("__eq__")
            return True

        __hash__ = object.__hash__

        def __repr__(self):
            calls.append("__repr__")
            return "Watched"

        def __len__(self):
            calls.append("__len__")
            return 1

        @property
        def derived(self):
            calls.append("derived")
            return 2

        def __call__(self):     # a callable object is still read by its attributes
            calls.append("__call__")

    class Label(str):
        def __repr__(self):
            calls.append("Label.__repr__")
            return "label"

    watched = Watched()
    assert summarize(watched) == "Watched(scale=1.0)"
    watched.scale = Label("gate")
    assert summarize(watched) == "Watched(scale='gate')" and summarize(Label("x")) == "'x'"
    assert calls == []
    assert summarize(summarize).startswith("<function")     # functions: by identity


def test_cycles_and_objects_that_cannot_be_read_say_so():
    cfg = Config(1.0)
    cfg.parent = cfg
    assert summarize(cfg) == "Config(name='block', parent=<cycle>, scale=1.0)"
    loop = []
    loop.append(loop)
    assert summarize(loop) == "list [<cycle>]"

    class OwnDict(dict):        # its items live where attribute reads do not reach
        pass

    for value, kind in ((OwnDict(a=1), "OwnDict"), (threading.Lock(), "lock"),
                        (Config(threading.Lock()), "lock")):
        text = summarize(value)
        assert unreadable(text) and "whose contents are not read" in text, text
    deep = Config(Config(Config(Config(Config(1.0)))))
    assert unreadable(summarize(deep)) and "nested more than" in summarize(deep)
    wide = Config(1.0)
    wide.__dict__.update({f"a{i}": i for i in range(CONTAINER_VALUES + 1)})
    assert unreadable(summarize(wide))
    long = Config("x" * 100)
    assert summarize(long).startswith("Config #")
