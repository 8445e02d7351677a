"""What rules see of a run: one `RuleContext`, built by the engine and shared by every rule.

Everything here lives for the whole run (a run lints many files with one project); nothing
belongs to one file or one site. The engine builds each site's segment once and passes it to
`SegmentRule.check`; whatever a rule wants to keep between calls goes in `memo`, never on the
rule itself. The binding model, the segment builder and the memo record by themselves which
files an answer rests on (`ckptlint.analysis.dependencies`), so the result cache stays right
without rules doing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ckptlint.analysis.bindings import BindingModel
from ckptlint.analysis.dependencies import DependencyRecorder
from ckptlint.analysis.project import Project
from ckptlint.analysis.resolve import Resolver
from ckptlint.analysis.segment import Reached, SegmentBuilder
from ckptlint.analysis.setup import SetupReader, TrainingSetup, setup_scripts
from ckptlint.analysis.tensors import TensorInference
from ckptlint.config import Config
from ckptlint.versions import Versions, versions_in_force

T = TypeVar("T")


class Memo:
    """Answers rules compute once per run, by key (`("first-write", id(node), attr)`): the
    key names what the answer is about, never a file or a site being checked."""

    def __init__(self, dependencies: DependencyRecorder) -> None:
        self.dependencies = dependencies
        self._answers: dict[Hashable, Any] = {}

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        return self.dependencies.cached(self._answers, key, compute)


@dataclass(eq=False)
class RuleContext:
    config: Config
    project: Project
    resolver: Resolver
    bindings: BindingModel
    segments: SegmentBuilder
    memo: Memo
    dependencies: DependencyRecorder = field(init=False)
    setup_reader: SetupReader = field(init=False)

    def __post_init__(self) -> None:
        self.dependencies = self.project.dependencies
        self.setup_reader = SetupReader(self.config.project_root, self.project)

    @classmethod
    def for_run(cls, config: Config, project: Project, resolver: Resolver) -> RuleContext:
        return cls(config, project, resolver, BindingModel(project, resolver),
                   SegmentBuilder(resolver, config.max_depth), Memo(project.dependencies))

    def versions(self, package: str) -> Versions:
        """The versions of `package` the project runs (read once per run)."""
        return self.memo.get(("versions", package),
                             lambda: versions_in_force(self.config, package))

    def setup(self, path: Path, wanted: frozenset[str]) -> TrainingSetup:
        """The `wanted` facts of the training setup a file's checkpoints run in: stated by
        the project's files (those near its root, such as `scripts/train.py`, included, and
        the file itself) that import it, and by configs at their default places."""
        path = path.resolve()

        def read() -> TrainingSetup:
            scripts = self.memo.get(("scripts",),
                                    lambda: setup_scripts(self.config.project_root))
            files = [*self.project.source_files(), *scripts, path]
            found = self.setup_reader.setup(files, path, wanted)
            self.dependencies.record_all(self.setup_reader.read_paths)
            return found
        return self.memo.get(("setup", path, wanted), read)

    def tensors(self, reached: Reached) -> TensorInference:
        """The tensor-value inference of one reached function (one per function per run)."""
        return self.memo.get(("tensors", id(reached.node)), lambda: TensorInference(
            self.resolver, reached.module, reached.scope, reached.node, reached.function.owner))
