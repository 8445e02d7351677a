"""Which calls the phases link to a project function (`PhaseFinder.matches`)."""

from __future__ import annotations

from pathlib import Path

from ckptlint.analysis.phases import Because, Phase, PhaseFinder

LAYERS = '''
import torch.nn as nn


class Inverted(nn.Module):
    def invert(self):
        self.sign = -1.0


def helper():
    pass
'''

TRAIN = '''
{imports}


def prepare(model):
    model.inverted.invert()


def train(model, data):
    for x in data:
        loss = model(x).sum()
        {call}
        loss.backward()
'''


def finder(tree: Path, imports: str, call: str) -> tuple[PhaseFinder, Path]:
    package = tree / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(LAYERS)
    (package / "train.py").write_text(TRAIN.format(imports=imports, call=call))
    files = sorted(package.glob("*.py"))
    phases = PhaseFinder(lambda: files, lambda path: path.read_text(),
                         lambda path: f"pkg.{path.stem}")
    return phases, package / "layers.py"


def test_a_method_call_on_a_module_outside_the_project_is_not_a_call_of_it(tmp_path):
    phases, layers = finder(tmp_path, "from PIL import ImageOps", "ImageOps.invert(x)")
    # Only `prepare` (an entry point) calls it: configuration.
    assert phases.function_when(layers, "Inverted.invert").phase == Phase.CONFIGURATION


def test_a_method_call_on_a_name_of_the_project_still_is(tmp_path):
    for imports, call in [("from . import layers", "layers.SHARED.invert()"),
                          ("import pkg.layers", "pkg.layers.SHARED.invert()"),
                          ("import pkg.layers as L", "L.SHARED.invert()")]:
        tree = tmp_path / str(abs(hash(imports)))
        tree.mkdir()
        phases, layers = finder(tree, imports, call)
        when = phases.function_when(layers, "Inverted.invert")
        assert (when.phase, when.because, when.via) == (Phase.STEP, Because.TRAINING,
                                                        "train"), imports


def test_a_function_called_through_a_relatively_imported_module_is_linked(tmp_path):
    phases, layers = finder(tmp_path, "from . import layers", "layers.helper()")
    when = phases.function_when(layers, "helper")
    assert (when.phase, when.via) == (Phase.STEP, "train")
