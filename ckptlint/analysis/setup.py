"""The training setup a project's checkpoints run in, read statically (CKP601, `--show-settings`).

A fact stated in a Python file holds for the checkpoints of that file and of the project
modules it imports, directly or through others (a training script's `DistributedDataParallel`
holds for the model it imports, not for another script's); a fact read from a config at its
default place holds for the whole project. Each fact is a `Fact` (a value and where it was
read) or None when nothing says; facts stated in contradictory ways, or through something the
linter cannot read, are `Fact(UNKNOWN, ...)`: rules act only on known values.

Where facts come from (docs/setup.md lists every spelling):
- Python files of the project (the project scan's, and those in the root and the folders just
  below it, such as `scripts/`), parsed with `ast` (never imported), calls only:
  `deepspeed=` (TrainingArguments, trl configs, Lightning) and `deepspeed.initialize(config=)`
  with a path or a dict literal (or a name bound to one at module level);
  `find_unused_parameters=` (DistributedDataParallel, DDPStrategy,
  DistributedDataParallelKwargs), `ddp_find_unused_parameters=`, `static_graph=`; `fsdp=`,
  `fully_shard(mp_policy=)`; peft (`get_peft_model`, `prepare_model_for_kbit_training`,
  `PeftModel.from_pretrained`, a `peft_config=` keyword) and `requires_grad_(False)`;
  Lightning `strategy=` strings, `DeepSpeedStrategy(stage=)`; string literals naming an
  accelerate config file.
- Config files the code names by path, or at a default place: the only DeepSpeed JSON config
  in the project's top two folder levels (several and none named: unknown), an accelerate
  config (`accelerate_config.yaml`, `default_config.yaml`) at the project root. JSON is read
  with `json`, YAML with `yaml.safe_load`; each file must be a regular file of at most
  `MAX_CONFIG_BYTES` inside the project root, reached without leaving it (docs/security.md).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptlint.screen.confirm import called_name
from ckptlint.storage.plain_data import read_json, read_regular_file
from ckptlint.syntax.ast_nodes import walk_nodes
from ckptlint.syntax.modnames import resolve_relative

if TYPE_CHECKING:
    from ckptlint.analysis.project import Project

MAX_CONFIG_BYTES = 1024 * 1024
MAX_SCANNED_FILES = 500  # files looked at near the root (`files_near_root`)
UNKNOWN = "unknown"
# Which facts a file may state, by the words standing in it: a question about some facts
# parses only the files that may state them. Each entry: a word (in the lower-cased text),
# whether a letter, digit or `_` may stand just before it, what must follow it, and the facts
# it may state. `NAMED`: the file may name a DeepSpeed config (which decides whether a JSON
# file near the root is taken for one).
NAMED = "names a DeepSpeed config"
_STRATEGY_FACTS = frozenset({"zero_stage", "find_unused_parameters", "fsdp", "lightning_strategy"})
_SETUP_WORDS: tuple[tuple[str, bool, re.Pattern[str] | None, frozenset[str]], ...] = tuple(
    (word, inside_word, re.compile(follows) if follows else None, frozenset(facts))
    for word, inside_word, follows, facts in (
        ("deepspeed", True, "", {"zero_stage", NAMED}),
        ("strategy", False, r"\s*=", _STRATEGY_FACTS),  # a keyword, not `sharding_strategy=`
        (".yaml", True, "[\"']", {"zero_stage", "fsdp", NAMED}),
        (".yml", True, "[\"']", {"zero_stage", "fsdp", NAMED}),
        ("peft", True, "", {"frozen_parameters"}),
        ("prepare_model_for_kbit_training", True, "", {"frozen_parameters"}),
        ("requires_grad", True, r"_\(\s*false|\s*=\s*false", {"frozen_parameters"}),
        ("find_unused_parameters", True, r"\s*=", {"find_unused_parameters"}),
        ("static_graph", True, r"\s*=", {"static_graph"}),
        ("fsdp", False, r"\s*=", {"fsdp"}),
        ("fully_shard", True, "", {"fsdp", "fsdp_mixed_precision"})))
MAX_REACHED_FILES = 10000
MAX_BACKWARD_STEPS = 32  # modules whose importers are searched for (`SetupReader.importers`)
RELATIVE_IMPORT = re.compile(r"from\s+\.")
# Facts that can only clear a finding: asked for, but not needed to be stated.
CLEARING_FACTS = frozenset({"static_graph"})
# Facts that configs at their default places may state.
CONFIG_FACTS = frozenset({"zero_stage", "fsdp"})
# A JSON file near the root is taken for a DeepSpeed config, when the code names none, only
# if its name says so (ds_config.json, ds_zero3.json, deepspeed.json, zero3_offload.json).
DEEPSPEED_CONFIG_NAME = re.compile(r"(^|[^a-z])(ds|deepspeed|zero)", re.IGNORECASE)
ACCELERATE_DEFAULT_NAMES = ("accelerate_config.yaml", "accelerate_config.yml",
                            "default_config.yaml", "default_config.yml")
PEFT_CALLS = ("get_peft_model", "prepare_model_for_kbit_training")
LIGHTNING_CLASSES = ("Trainer", "Fabric")  # whose `strategy=` names Lightning's strategies
DDP_CLASSES = ("DistributedDataParallel", "DDP", "DDPStrategy", "DistributedDataParallelKwargs")


@dataclass(frozen=True)
class Fact:
    value: Any  # an int, bool or str; UNKNOWN when stated in ways that disagree or cannot be read
    origin: str  # where: `train.py:12`, `ds_zero3.json`


@dataclass(frozen=True)
class TrainingSetup:
    zero_stage: Fact | None = None  # DeepSpeed ZeRO stage (0-3)
    frozen_parameters: Fact | None = None  # True: peft adapters or `requires_grad_(False)`
    find_unused_parameters: Fact | None = None  # DDP's
    static_graph: Fact | None = None  # DDP's `static_graph=True` (tolerates reentrant)
    fsdp: Fact | None = None  # FSDP in use (`fsdp=`, `fully_shard`, a strategy)
    fsdp_mixed_precision: Fact | None = None  # `fully_shard(mp_policy=...)` as written
    lightning_strategy: Fact | None = None

    def lines(self) -> list[str]:
        """`name: value (origin)` per fact, `-` where nothing says."""
        return [f"{item.name.replace('_', '-')}: "
                + (f"{fact.value} ({fact.origin})" if (fact := getattr(self, item.name))
                   else "-") for item in fields(self)]

    # The facts each question needs (`SetupReader.setup(wanted=...)`).
    REENTRANT_NEEDS = frozenset({"zero_stage", "frozen_parameters"})
    DDP_NEEDS = frozenset({"find_unused_parameters", "static_graph"})

    def requires_reentrant(self) -> bool:
        """ZeRO-3 with frozen parameters: a non-reentrant replay meets partitioned weights."""
        return is_true(self.frozen_parameters) and self.zero_stage is not None \
            and self.zero_stage.value == 3

    def as_data(self, *names: str) -> dict[str, Any]:
        """The named facts as finding data: `{name: value, name_from: origin}`."""
        data: dict[str, Any] = {}
        for name in names:
            fact = getattr(self, name)
            if fact is not None:
                data[name], data[f"{name}_from"] = fact.value, fact.origin
        return data


def is_true(fact: Fact | None) -> bool:
    return fact is not None and fact.value is True


@dataclass
class _Collected:
    """Every statement of each fact found, before they are merged."""

    source: Path | None = None  # the Python file stating them (None: configs at default places)
    facts: dict[str, list[Fact]] = field(default_factory=dict)
    ds_configs_named: bool = False  # the code names a DeepSpeed config (readable or not)

    def add(self, name: str, value: Any, origin: str) -> None:
        self.facts.setdefault(name, []).append(Fact(value, origin))

    def extend(self, other: _Collected, wanted: frozenset[str] | None = None) -> None:
        for name, found in other.facts.items():
            if wanted is None or name in wanted:
                self.facts.setdefault(name, []).extend(found)

    def merged(self) -> TrainingSetup:
        values = {}
        for name, found in self.facts.items():
            distinct = {repr(fact.value) for fact in found}
            values[name] = found[0] if len(distinct) == 1 else Fact(
                UNKNOWN, "; ".join(f"{fact.value} at {fact.origin}" for fact in found[:4]))
        return TrainingSetup(**values)


class SetupReader:
    """Reads the setup of one project; each file is read once per run however many sites
    ask. `project` finds the modules a file imports (module name -> file)."""

    def __init__(self, root: Path, project: Project) -> None:
        self.root = root.resolve()
        self.project = project
        self.collected = _Collected()
        self._by_source: dict[Path, _Collected] = {}
        self._imports: dict[Path, list[Path]] = {}
        self._reach: dict[Path, frozenset[Path]] = {}
        self._loaded: dict[Path, Any] = {}
        self._defaults: dict[bool, _Collected] = {}
        self.read_paths: set[Path] = set()  # every file read (the result cache's dependencies)
        self._shown: dict[Path, str] = {}  # `where`'s file part, by path (one resolve each)
        self._words: dict[Path, frozenset[str]] = {}  # `setup_words` of each file's text
        self._module_files: dict[tuple[str, Path], Path | None] = {}  # `module_file`'s answers
        self._project_files: frozenset[Path] | None = None  # `followed`'s
        self._importers: dict[Path, frozenset[Path] | None] = {}  # `importers`' answers

    def setup(self, files: Iterable[Path], site_file: Path | None = None,
              wanted: frozenset[str] | None = None) -> TrainingSetup:
        """The setup of `site_file`'s checkpoints (None: of the whole project) stated by the
        Python `files`, the configs they name, and configs at their default places.
        `wanted`: the facts asked for (None: all); unless each of them but the
        `CLEARING_FACTS` is stated somewhere, none is given, and no import is followed.
        With `wanted`, only the files whose words may state one of them (or name a DeepSpeed
        config) are parsed, those that must be stated first: a framework's thousands of files
        are parsed only when they may matter."""
        universe = list(dict.fromkeys(files))
        reading = universe
        if wanted is not None:
            needed = sorted(wanted - CLEARING_FACTS,
                            key=lambda fact: (self.candidate_bytes(universe, fact), fact))
            if not all(self.stated_somewhere(universe, fact) for fact in needed):
                return TrainingSetup()
            reading = self.may_state(universe, wanted | {NAMED})
        stating: list[_Collected] = []
        named = False
        for path in reading:
            found = self.facts_of(path)
            named |= found.ds_configs_named
            if found.facts:
                stating.append(found)
        stated = {name for found in stating for name in found.facts}
        if wanted is not None and not wanted - CLEARING_FACTS - CONFIG_FACTS <= stated:
            return TrainingSetup()  # (before any config is looked for)
        defaults = self.default_configs(named)
        stated |= set(defaults.facts)
        if wanted is not None and not wanted - CLEARING_FACTS <= stated:
            return TrainingSetup()
        total = _Collected()
        for found in stating:
            if wanted is not None and not wanted & set(found.facts):
                continue
            if site_file is None or (found.source is not None
                                     and self.reaches(found.source, site_file, universe)):
                total.extend(found, wanted)
        total.extend(defaults, wanted)
        return total.merged()

    def stated_somewhere(self, files: list[Path], fact: str) -> bool:
        """Does one of `files` state `fact` (a config fact: or a config at its default place)?
        Parses the files that may state it until one does."""
        if any(fact in self.facts_of(path).facts for path in self.may_state(files, {fact})):
            return True
        if fact not in CONFIG_FACTS:
            return False
        named = any(self.facts_of(path).ds_configs_named
                    for path in self.may_state(files, {NAMED}))
        return fact in self.default_configs(named).facts

    def candidate_bytes(self, files: list[Path], fact: str) -> int:
        """The size of the texts that may state `fact` (the cheapest question is asked first)."""
        return sum(len(self.project.source_text(path) or "")
                   for path in self.may_state(files, {fact}))

    def read_words(self, files: Iterable[Path]) -> None:
        """Read now the setup words of each of `files` (`may_state` reads them as asked): in
        a process about to fork analysing workers, which then inherit them."""
        self.may_state(list(files), ())

    def may_state(self, files: list[Path], facts: Iterable[str]) -> list[Path]:
        """The `files` whose text may state one of `facts` (as `_SETUP_WORDS` names them). A file
        with any setup word is a dependency of the answer, read or not (an edit there may
        change it)."""
        chosen = []
        for path in files:
            words = self._words.get(path)
            if words is None:
                text = self.project.source_text(path)
                words = self._words[path] = frozenset(setup_words(text) if text else ())
                if words:
                    self.read_paths.add(path)
            if not words.isdisjoint(facts):
                chosen.append(path)
        return chosen

    def facts_of(self, path: Path) -> _Collected:
        if path not in self._by_source:
            self.collected = self._by_source[path] = _Collected(path)
            self.read_source(path)
        return self._by_source[path]

    def reaches(self, source: Path, site_file: Path, universe: list[Path]) -> bool:
        """Does `source` import `site_file`, directly or through others? Searched backwards
        from `site_file` through the `universe` (the project's files), unless more than
        `MAX_BACKWARD_STEPS` modules lead to it: then forwards from `source`."""
        importers = self.importers(site_file, universe)
        return source in importers if importers is not None else site_file in self.reach(source)

    def importers(self, site_file: Path, universe: list[Path]) -> frozenset[Path] | None:
        """`site_file` and the files of `universe` that import it, directly or through others:
        the imports of a file are read only when its text names the module imported (one
        `str.find` each), so a site file few modules import costs a few text searches, not
        the import graph of a whole framework. None: too many lead to it."""
        if site_file not in self._importers:
            found = {site_file}
            pending = [site_file]
            for _ in range(MAX_BACKWARD_STEPS):
                if not pending:
                    break
                target = pending.pop()
                named_as = target.parent.name if target.name == "__init__.py" else target.stem
                for path in universe:
                    if path not in found and self.may_import(path, named_as, target) \
                            and target in self.imports_of(path):
                        found.add(path)
                        pending.append(path)
            self._importers[site_file] = None if pending else frozenset(found)
            self.read_paths |= set(universe) - self.followed_files()
            self.read_paths |= found
        return self._importers[site_file]

    def may_import(self, path: Path, named_as: str, target: Path) -> bool:
        """Can `path`'s imports name the module `target` (last name `named_as`)? A package's
        `__init__.py` is also imported by `from . import x` from inside it; identifiers
        outside ASCII may be written in other forms (NFKC)."""
        text = self.project.source_text(path)
        if not text:
            return False
        return named_as in text or not text.isascii() or (
            target.name == "__init__.py" and RELATIVE_IMPORT.search(text) is not None)

    def reach(self, path: Path) -> frozenset[Path]:
        """`path` and the project files it imports, directly or through others."""
        if path not in self._reach:
            seen = {path}
            pending = [path]
            while pending and len(seen) < MAX_REACHED_FILES:
                for imported in self.imports_of(pending.pop()):
                    if imported not in seen:
                        seen.add(imported)
                        pending.append(imported)
            self._reach[path] = frozenset(seen)
            self.read_paths |= seen
        return self._reach[path]

    def imports_of(self, path: Path) -> list[Path]:
        """The project files a file imports (its own folder counts, as for a script). In an
        environment folder (`site-packages`), only the packages being linted are project
        files: the distributions installed beside them are not followed."""
        if path not in self._imports:
            module, is_package = self.project.module_name(path)
            names = dict.fromkeys(name for statement in
                                  import_statements(self.project.source_text(path) or "")
                                  for name in imported_names(statement, module, is_package))
            found = (self.module_file(name, path.parent) for name in names)
            self._imports[path] = [file for file in dict.fromkeys(found)
                                   if file is not None and self.followed(file)]
        return self._imports[path]

    def followed(self, path: Path) -> bool:
        """Is `path` a project file for `reach` (not one of another installed distribution)?"""
        from ckptlint.analysis.project import ENVIRONMENT_FOLDERS

        return path in self.followed_files() or not ENVIRONMENT_FOLDERS.intersection(path.parts)

    def followed_files(self) -> frozenset[Path]:
        if self._project_files is None:
            self._project_files = frozenset(self.project.source_files())
        return self._project_files

    def module_file(self, dotted_name: str, folder: Path) -> Path | None:
        key = (dotted_name, folder)
        if key not in self._module_files:
            found = self.project.module_path(dotted_name)
            if found is None:
                base = folder.joinpath(*dotted_name.split("."))
                found = next((candidate for candidate in (base.with_suffix(".py"),
                                                          base / "__init__.py")
                              if candidate.is_file()), None)
            self._module_files[key] = found.resolve() if found is not None else None
        return self._module_files[key]

    def where(self, path: Path, node: ast.AST | None = None) -> str:
        shown = self._shown.get(path)
        if shown is None:
            try:
                shown = path.resolve().relative_to(self.root).as_posix()
            except ValueError:
                shown = path.name
            self._shown[path] = shown
        return f"{shown}:{node.lineno}" if node is not None and hasattr(node, "lineno") \
            else shown

    # -- Python files ---------------------------------------------------------------------
    def read_source(self, path: Path) -> None:
        text = self.project.source_text(path)
        tree = parse(text) if text and setup_words(text) else None
        if tree is None:
            return
        self.read_paths.add(path)
        constants = module_constants(tree)
        for node in walk_nodes(tree):
            if isinstance(node, ast.Call):
                self.read_call(path, node, constants)
            elif isinstance(node, ast.Assign) and is_false(node.value) and any(
                    isinstance(target, ast.Attribute) and target.attr == "requires_grad"
                    for target in node.targets):
                self.collected.add("frozen_parameters", True, self.where(path, node))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.endswith((".yaml", ".yml")) and len(node.value) < 300:
                config = self.config_file(path, node.value)
                if config is not None:
                    self.read_accelerate_config(config)

    def read_call(self, path: Path, call: ast.Call, constants: dict[str, ast.expr]) -> None:
        name = called_name(call.func) or ""
        keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
        here = self.where(path, call)
        add = self.collected.add
        if "deepspeed" in keywords and not is_none(keywords["deepspeed"]):
            self.read_deepspeed_value(path, keywords["deepspeed"], constants, here)
        if name == "initialize" and isinstance(call.func, ast.Attribute) \
                and called_name(call.func.value) == "deepspeed":
            for keyword in ("config", "config_params"):
                if keyword in keywords:
                    self.read_deepspeed_value(path, keywords[keyword], constants, here)
        if name == "DeepSpeedPlugin":  # accelerate's
            if "zero_stage" in keywords:
                self.collected.ds_configs_named = True
                add("zero_stage", as_stage(literal(keywords["zero_stage"])), here)
            if "hf_ds_config" in keywords:
                self.read_deepspeed_value(path, keywords["hf_ds_config"], constants, here)
        if name == "DeepSpeedStrategy":
            stage = keywords.get("stage")
            self.collected.ds_configs_named = True
            add("zero_stage", as_stage(literal(stage)) if stage is not None else 2, here)
        if name in DDP_CLASSES and "find_unused_parameters" in keywords:
            add("find_unused_parameters", flag(keywords["find_unused_parameters"]), here)
        if "ddp_find_unused_parameters" in keywords \
                and not is_none(keywords["ddp_find_unused_parameters"]):
            add("find_unused_parameters", flag(keywords["ddp_find_unused_parameters"]), here)
        if name in DDP_CLASSES and "static_graph" in keywords:
            add("static_graph", flag(keywords["static_graph"]), here)
        if "strategy" in keywords and name in LIGHTNING_CLASSES:
            self.read_strategy(keywords["strategy"], here)
        if "fsdp" in keywords and literal(keywords["fsdp"]) not in ("", None, False, [], ()):
            add("fsdp", True, here)
        if name == "fully_shard":
            add("fsdp", True, here)
            if "mp_policy" in keywords:
                add("fsdp_mixed_precision", source_of(keywords["mp_policy"]), here)
        if name in PEFT_CALLS or (name == "from_pretrained"
                                  and isinstance(call.func, ast.Attribute)
                                  and (called_name(call.func.value) or "").startswith("Peft")):
            add("frozen_parameters", True, here)
        if "peft_config" in keywords and not is_none(keywords["peft_config"]):
            add("frozen_parameters", True, here)
        if name == "requires_grad_" and call.args and is_false(call.args[0]):
            add("frozen_parameters", True, here)

    def read_strategy(self, value: ast.expr, here: str) -> None:
        text = literal(value)
        if not isinstance(text, str):
            return
        self.collected.add("lightning_strategy", text, here)
        if text.startswith("deepspeed"):
            stage = re.match(r"deepspeed_stage_(\d)", text)
            self.collected.add("zero_stage", int(stage[1]) if stage else UNKNOWN, here)
        elif text == "ddp_find_unused_parameters_true":
            self.collected.add("find_unused_parameters", True, here)
        elif text.startswith("fsdp"):
            self.collected.add("fsdp", True, here)

    def read_deepspeed_value(self, path: Path, value: ast.expr,
                             constants: dict[str, ast.expr], here: str) -> None:
        if isinstance(value, ast.Name) and value.id in constants:
            value = constants[value.id]
        self.collected.ds_configs_named = True
        if isinstance(value, ast.Dict):
            self.collected.add("zero_stage", zero_stage(literal(value)), here)
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            config = self.config_file(path, value.value)
            stage = zero_stage(self.load(config)) if config is not None else UNKNOWN
            origin = self.where(config) if config is not None else f"{value.value!r} at {here}"
            self.collected.add("zero_stage", stage, origin)
        else:  # a path or dict computed at run time
            self.collected.add("zero_stage", UNKNOWN, f"{source_of(value)} at {here}")

    # -- config files ---------------------------------------------------------------------
    def config_file(self, source: Path, named: str) -> Path | None:
        """The file a string names, relative to the naming file's folder or the project root,
        when it lies inside the project root (links followed only within it). The places
        looked at are recorded, found or not: a config created there later changes the
        answer (the result cache's dependencies)."""
        for base in (source.parent, self.root):
            candidate = base / named
            try:
                resolved = candidate.resolve()
            except (OSError, RuntimeError, ValueError):
                continue
            if not resolved.is_relative_to(self.root):
                continue
            self.read_paths.add(resolved)
            if resolved.is_file():
                return resolved
        return None

    def load(self, path: Path) -> Any:
        """A config file's data (JSON, or YAML with `safe_load`); None when unusable."""
        self.read_paths.add(path)
        if path not in self._loaded:
            self._loaded[path] = load_config(path)
        return self._loaded[path]

    def read_accelerate_config(self, path: Path) -> None:
        config = self.load(path)
        if not isinstance(config, dict) or "distributed_type" not in config:
            return
        origin = self.where(path)
        kind = str(config.get("distributed_type", "")).upper()
        if kind == "DEEPSPEED":
            self.collected.ds_configs_named = True
            ds = config.get("deepspeed_config")
            ds = ds if isinstance(ds, dict) else {}
            file = ds.get("deepspeed_config_file")
            if isinstance(file, str) and file:
                inner = self.config_file(path, file)
                stage = zero_stage(self.load(inner)) if inner is not None else UNKNOWN
                self.collected.add("zero_stage", stage,
                                   self.where(inner) if inner is not None else origin)
            else:
                self.collected.add("zero_stage", as_stage(ds.get("zero_stage")), origin)
        elif kind == "FSDP":
            self.collected.add("fsdp", True, origin)

    def default_configs(self, named: bool) -> _Collected:
        """Facts of the configs at their default places (`named`: the code names a DeepSpeed
        config, so no JSON file is taken for it)."""
        if named not in self._defaults:
            self.collected = self._defaults[named] = _Collected()
            for path in default_place_configs(self.root):
                if path.suffix != ".json":
                    self.read_accelerate_config(path)
            if not named and not self.collected.ds_configs_named:
                self.read_only_deepspeed_config()
        return self._defaults[named]

    def read_only_deepspeed_config(self) -> None:
        found = [(path, stage) for path in default_place_configs(self.root)
                 if path.suffix == ".json"
                 and isinstance(data := self.load(path), dict) and "zero_optimization" in data
                 and (stage := zero_stage(data)) is not None]
        if len(found) == 1:
            path, stage = found[0]
            self.collected.add("zero_stage", stage, f"{self.where(path)} (the only DeepSpeed "
                                                    "config in the project)")
        elif found:
            self.collected.add("zero_stage", UNKNOWN, f"{len(found)} DeepSpeed configs, none "
                                                      "named by the code")


def parse(text: str) -> ast.Module | None:
    """A Python file's `ast` (None when not Python)."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def setup_words(text: str) -> set[str]:
    """The facts (and `NAMED`) a Python text may state, by the words in it (`_SETUP_WORDS`)."""
    lowered = text.lower()
    found: set[str] = set()
    for word, inside_word, follows, facts in _SETUP_WORDS:
        if facts <= found:
            continue
        start = lowered.find(word)
        while start >= 0:
            end = start + len(word)
            if (inside_word or start == 0 or not (lowered[start - 1].isalnum()
                                                  or lowered[start - 1] == "_")) \
                    and (follows is None or follows.match(lowered, end)):
                found |= facts
                break
            start = lowered.find(word, start + 1)
    return found


def import_statements(text: str) -> Iterator[ast.Module]:
    """The import statements of a file, each parsed alone: the lines starting with `import`
    or `from`, continued while brackets are open or a line ends in a backslash (a full parse
    of every file an import reaches costs seconds on a framework; a line that only looks
    like an import, in a docstring, does not parse and is skipped)."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        statement = lines[index].lstrip()
        if statement.startswith(("import ", "from ")):
            while (statement.count("(") > statement.count(")")
                   or statement.endswith("\\")) and index + 1 < len(lines):
                index += 1
                statement += "\n" + lines[index]
            try:
                yield ast.parse(statement)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        index += 1


def imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names of the modules a file imports (`from a import b`: `a` and `a.b`),
    relative imports made absolute from the file's `module`."""
    for node in walk_nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative(module, is_package, node.level, node.module) \
                if node.level else node.module or ""
            if base:
                yield base
            yield from (f"{base}.{alias.name}" if base else alias.name
                        for alias in node.names if alias.name != "*")


def load_config(path: Path) -> Any:
    if path.suffix == ".json":
        return read_json(path, MAX_CONFIG_BYTES)
    data = read_regular_file(path, MAX_CONFIG_BYTES)
    if data is None:
        return None
    import yaml  # (only here: most runs read no YAML)

    try:
        return yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None


def default_place_configs(root: Path) -> list[Path]:
    """The files that would be read as configs at their default places: accelerate's names at
    the root and DeepSpeed-named JSON files near it. Adding one changes the setup, so the
    result cache watches this list (`ckptlint.engine.cache.project_signature`)."""
    accelerate = [root / name for name in ACCELERATE_DEFAULT_NAMES]
    return [path for path in accelerate if path.is_file() and not path.is_symlink()] + [
        path for path in files_near_root(root, ".json") if DEEPSPEED_CONFIG_NAME.search(path.name)]


def setup_scripts(root: Path) -> list[Path]:
    """The Python files near the root (resolved) whose setup counts with the project's."""
    return [path.resolve() for path in files_near_root(root, ".py")]


def files_near_root(root: Path, suffix: str) -> list[Path]:
    """Files ending in `suffix` in the root and the folders just below it (hidden and
    skipped folders left out, links never followed), at most `MAX_SCANNED_FILES`: where
    configs and training scripts (`scripts/train.py`) usually are."""
    from ckptlint.analysis.project import SKIPPED_DIRS

    found: list[Path] = []
    folders = [root]
    try:
        folders += sorted(Path(entry.path) for entry in os.scandir(root)
                          if entry.is_dir(follow_symlinks=False)
                          and entry.name not in SKIPPED_DIRS and not entry.name.startswith("."))
    except OSError:
        return []
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        found += [Path(entry.path) for entry in entries if entry.name.endswith(suffix)
                  and entry.is_file(follow_symlinks=False)]
    return found[:MAX_SCANNED_FILES]


def zero_stage(config: Any) -> int | str | None:
    """A DeepSpeed config's ZeRO stage (0 when it has no `zero_optimization`); UNKNOWN when
    it is not a readable config or says `"auto"`."""
    if not isinstance(config, dict):
        return UNKNOWN
    zero = config.get("zero_optimization", {})
    if not isinstance(zero, dict):
        return UNKNOWN
    return as_stage(zero.get("stage", 0))


def as_stage(value: Any) -> int | str:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if type(value) is int and 0 <= value <= 3 else UNKNOWN


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names bound once, to a string or a dict literal."""
    bound: dict[str, list[ast.expr]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(statement.value)
    return {name: values[0] for name, values in bound.items()
            if len(values) == 1 and isinstance(values[0], (ast.Dict, ast.Constant))}


def source_of(node: ast.expr) -> str:
    """An expression as written, cut to 80 characters."""
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):
        return "an expression"
    return text if len(text) <= 80 else text[:77] + "..."


def literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return UNKNOWN


def flag(node: ast.expr) -> bool | str:
    value = literal(node)
    return value if isinstance(value, bool) else UNKNOWN


def is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
