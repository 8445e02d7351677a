"""When a change of state can run, relative to a checkpointed segment's forward and its replay.

A segment's forward and its replay are separated by the rest of that step's forward and by
backward. A write of module-level or instance state runs in one of these phases:

1. `segment`: inside the checkpointed code itself (decided by the segment, not here);
2. `forward`: in a forward path that can run after the segment in the same step: a module's
   `forward`, what it calls, forward hooks;
3. `backward-hook`: in a backward hook (`register_hook`, `register_full_backward_hook`, ...)
   or an autograd `Function.backward`, and what they call;
4. `step`: in training code between a forward call and its `.backward()`, and what that code
   calls; a function nothing in the project calls counts here too (training code outside
   the project may call it at any time), unless its name makes it a setter or switch;
5. `configuration`: only in setup (`__init__` and the other setup methods), in setters and
   switches, in training code between steps (after `.backward()`, before the next forward),
   at module level outside a training loop, or in functions called only from functions
   nothing in the project calls (entry points such as a pipeline's `__call__`: when they
   run is unknown, and an unknown is not reported).

The call graph decides: a function's phase is the most run-time one of the places that call
it. Names (`set_*`, `enable_*`, ...; framework hooks such as Lightning's `training_step`)
decide only for a function with no caller in the project.
Calls are matched by name: `self.m(...)` to methods of related classes, `obj.m(...)` to any
method named `m` unless the name is a generic one (`update`, `step`, `forward`, ...) or `obj`
is a name imported from outside the project (`ImageOps.invert(mask)` after
`from PIL import ImageOps`), `f(...)` to functions of the same file or imported by that name.

The facts come from `ast` summaries of the project's files (`ckptlint.analysis.callgraph`),
made only for files whose text names what is asked about, once per file per run.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ckptlint.analysis.callgraph import (
    AttributeWrite,
    CallSite,
    FileSummary,
    FunctionSummary,
    summarize,
    summary_from_plain,
    summary_to_plain,
)
from ckptlint.analysis.mutators import CONTAINER_MUTATORS, is_mutator
from ckptlint.analysis.summary_store import SignedText, SummaryStore
from ckptlint.analysis.text_facts import (
    ASSIGN_OPERATOR,
    IndexFacts,
    called_names,
    index_facts,
    joined_names,
    name_set,
    sorted_names,
    written_attribute_names,
)
from ckptlint.enums import TextEnum
from ckptlint.storage.plain_data import ShapeError

# Methods that set an object up: their writes are configuration, whoever calls them.
SETUP_METHODS = frozenset({
    "__init__", "__new__", "__post_init__", "__setstate__", "__init_subclass__",
    "reset_parameters", "_reset_parameters", "_init_weights", "init_weights", "_initialize",
    "__set_name__", "_load_from_state_dict", "load_state_dict", "post_init", "_post_init",
    "tie_weights", "_tie_or_clone_weights",
})
# Setters and switches, by name (for functions with no caller in the project).
SETTER_PREFIXES = ("set_", "enable_", "disable_", "reset_", "fuse_", "unfuse_", "switch_to_")
SETTER_NAMES = frozenset({"fuse", "unfuse", "switch_to_deploy"})
# Method names too common to link `obj.name(...)` to a project method of that name: Python
# containers and objects, tensors and `torch.nn.Module`/optimizer methods.
GENERIC_METHODS = frozenset({
    *CONTAINER_MUTATORS, "forward", "__call__", "__init__", "__enter__", "__exit__", "step",
    "update", "reset", "run", "apply", "train", "eval", "to", "cuda", "cpu", "float", "half",
    "double", "copy", "clone", "close", "open", "read", "write", "get", "set", "load", "save",
    "compile", "register", "start", "stop", "wait", "format", "items", "keys", "values",
    "state_dict", "parameters", "modules", "children", "named_modules",
    "named_parameters", "zero_grad", "backward", "init", "setup", "build", "call", "main",
    "detach", "item", "view", "reshape", "size", "join", "split", "strip", "replace", "sum",
    "mean", "max", "min", "flush", "info", "debug", "warning", "error", "log", "fit",
})
# Methods training frameworks call (Lightning, the transformers Trainer), for methods with no
# caller in the project: between the forward and `.backward()`, or between steps.
FRAMEWORK_STEP_METHODS = frozenset({"training_step", "compute_loss", "on_before_backward"})
FRAMEWORK_BETWEEN_STEPS = frozenset({
    "on_train_batch_start", "on_train_batch_end", "on_after_backward",
    "on_before_optimizer_step", "optimizer_step", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "validation_step",
})


class Phase(TextEnum):
    SEGMENT = "segment"
    FORWARD = "forward"
    BACKWARD_HOOK = "backward-hook"
    STEP = "step"
    CONFIGURATION = "configuration"


RUNTIME_PHASES = frozenset({Phase.SEGMENT, Phase.FORWARD, Phase.BACKWARD_HOOK, Phase.STEP})


class Because(TextEnum):
    """Why a change has its phase (findings carry it as `changes[].because`)."""

    SEGMENT = "segment"  # inside the checkpointed code
    FORWARD = "forward"  # a `forward` method, or called from one
    FORWARD_HOOK = "forward-hook"  # a registered forward hook, or called from one
    BACKWARD_HOOK = "backward-hook"  # a backward hook or `Function.backward`, or their callees
    TRAINING = "training"  # between a forward call and its `.backward()`
    UNCALLED = "uncalled"  # nothing in the project calls it
    ENTRY_POINT = "entry-point"  # called only from functions nothing in the project calls
    SETUP = "setup"  # `__init__` and the other setup methods
    SETTER = "setter"  # a setter or switch with no caller in the project
    BETWEEN_STEPS = "between-steps"  # training code outside its forward-to-backward windows
    MODULE_LEVEL = "module-level"  # module-level code outside a training window


@dataclass(frozen=True)
class When:
    phase: Phase
    because: Because
    via: str | None  # the function that decides (a forward, a hook, training code); None
    # at module level

    @property
    def runtime(self) -> bool:
        return self.phase in RUNTIME_PHASES


PRIORITY = {Phase.FORWARD: 4, Phase.BACKWARD_HOOK: 3, Phase.STEP: 2, Phase.CONFIGURATION: 1}


def is_setter_name(name: str) -> bool:
    bare = name.lstrip("_")
    return bare in SETTER_NAMES or bare.startswith(SETTER_PREFIXES)


def function_key(qualname: str) -> str:
    """The summarized function holding a change: `f` for `f.<lambda>`, `f.<comprehension>`."""
    parts = qualname.split(".") if qualname else []
    while parts and parts[-1].startswith("<"):
        parts.pop()
    return ".".join(parts)


# A hook registration's arguments, up to the first `)` (a `partial(fn, ...)` names `fn`
# before it).
HOOK_REGISTRATION = re.compile(r"register_\w*hook\w*\s*\(([^)]*)")


def hook_argument_words(text: str) -> frozenset[str]:
    """The words among the text's hook registrations' arguments: the names a file may
    register as hooks, before it is summarized."""
    if "register_" not in text:
        return frozenset()
    return frozenset(word for match in HOOK_REGISTRATION.finditer(text)
                     for word in re.findall(r"\w+", match.group(1)))


DIRECT_LOOKUPS = 8  # names looked up one by one before the index is built


def plain_summary(summary: FileSummary | None) -> dict | None:
    return summary_to_plain(summary) if summary is not None else None


def stored_summary(data: object) -> FileSummary | None:
    return summary_from_plain(data) if data is not None else None


def element_write_pattern(attr: str) -> re.Pattern[str]:
    """`.attr` written or mutated (`element_write` reads what stands before it)."""
    name = re.escape(attr)
    return re.compile(rf"\.{name}(?:[ \t]*(?:\[[^\]\n]*\][ \t]*)?{ASSIGN_OPERATOR}|\.\w+)")


# A `for` and the rest of its line up to a `:` (the names it binds, what it iterates).
FOR_CLAUSE = re.compile(r"\bfor\b([^\n:]*)")
WORD_CHARACTER = re.compile(r"\w")


def for_clauses(text: str) -> list[str]:
    return FOR_CLAUSE.findall(text)


def element_write(text: str, pattern: re.Pattern[str], clauses: list[str]) -> bool:
    """Whether the text may write the attribute on an element of a collection: after a
    subscript (`X[k].attr`), or on a name some `for` binds (a `for` clause, `clauses`, naming
    it before an `in`). The pattern finds `.attr`; the receiver before it is read backwards
    (one expression starting with the receiver cannot skip ahead to `.attr`: it was tried at
    every position of every file writing the attribute)."""
    looked_up: set[str] = set()  # receivers no `for` binds
    position = 0
    while (match := pattern.search(text, position)) is not None:
        end = match.start()
        while end and text[end - 1] in " \t":
            end -= 1
        if end and text[end - 1] == "]":
            return True
        begin = end
        while begin and WORD_CHARACTER.match(text[begin - 1]):
            begin -= 1
        if begin == end:  # no receiver: a call's result, a string
            position = match.start() + 1
            continue
        position = match.end()
        receiver = text[begin:end]
        if receiver in looked_up:
            continue
        bound = re.compile(rf"\b{re.escape(receiver)}\b[^\n:]*\bin\b")
        if any(receiver in clause and bound.search(clause) for clause in clauses):
            return True
        looked_up.add(receiver)
    return False


class PhaseFinder:
    """Phases of functions and rows of the project, answered from `ast` summaries.

    `files` lists the project's files, `text` reads one (None when it cannot), and
    `module_name` gives a file's dotted module name; `store` keeps the files' summaries and
    text facts by content (between runs when it has a folder), and the facts asked of every
    file by path, when `signed_text` tells the file's stat signature as it was read
    (`SummaryStore.path_fact`). Everything is kept for the run.
    """

    def __init__(self, files: Callable[[], list[Path]], text: Callable[[Path], str | None],
                 module_name: Callable[[Path], str], store: SummaryStore | None = None,
                 signed_text: Callable[[Path], SignedText] | None = None) -> None:
        self.files = files
        self.text = text
        self.signed_text = signed_text or (lambda path: (text(path), None))
        self.module_name = module_name
        self.store = store if store is not None else SummaryStore()
        self._summaries: dict[Path, FileSummary | None] = {}
        self._calling: dict[str, list[Path]] | None = None
        self._index_stored: bool | None = None  # the store holds every file's called names
        self._direct: dict[str, list[Path]] = {}
        self._functions: dict[tuple[Path, str], When | None] = {}
        self._writes: dict[tuple[str, frozenset[str]], list[tuple[Path, AttributeWrite]]] = {}
        self._written: dict[str, list[Path]] | None = None
        self._element_writes: dict[tuple[Path, str], bool] = {}
        self._for_clauses: dict[Path, list[str]] = {}
        self._hook_words: dict[Path, frozenset[str]] = {}
        self._path_names: frozenset[str] | None = None  # see `outside_project`

    def summary(self, path: Path) -> FileSummary | None:
        if path not in self._summaries:
            text = self.text(path)
            self._summaries[path] = (
                self.store.fact(text, "summary", summarize, plain_summary, stored_summary)
                if text is not None else None)
        return self._summaries[path]

    def text_fact(self, path: Path, name: str,
                  names: Callable[[str], set[str]]) -> set[str] | None:
        """A set of names found in a file's text, kept by path in the store."""
        return self.store.path_fact(path, name, lambda: self.signed_text(path), names,
                                    sorted_names, name_set)

    def files_calling(self, name: str) -> list[Path]:
        """Project files whose text may call `name` or pass it as an argument.

        The first few names are looked up directly (a substring test, then one expression on
        the files that hold the name: cheap where little is asked, as in torch's own tree);
        past `DIRECT_LOOKUPS` names, or from the first when the store holds every file's
        called names already (an earlier run made them), one index of every file's called
        names answers them all. Both give the same files."""
        if self._calling is None and self._index_stored is None:
            self._index_stored = self.store.holds_path_facts("calls", self.files())
        if self._calling is None and not self._index_stored and (
                name in self._direct or len(self._direct) < DIRECT_LOOKUPS):
            if name not in self._direct:
                use = re.compile(rf"\b(?<!def ){re.escape(name)}\s*+\(|[(,=]\s*+(?:\w++\.)?"
                                 rf"{re.escape(name)}\s*[,)]")
                self._direct[name] = [path for path in self.files()
                                      if (text := self.text(path)) and name in text
                                      and use.search(text) is not None]
            return self._direct[name]
        return self.calling_index().get(name, [])

    def calling_index(self) -> dict[str, list[Path]]:
        """Name -> the project files whose text may call it or pass it as an argument."""
        if self._calling is None:
            self._calling = self.index_of("calls", called_names)
        return self._calling

    def index_of(self, fact: str, names: Callable[[str], set[str]],
                 found: Mapping[Path, IndexFacts] | None = None) -> dict[str, list[Path]]:
        """Name -> the project files whose text `fact` holds it, in the files' order; from
        `found` for the files there (`build_indexes`), else from `text_fact`."""
        index: dict[str, list[Path]] = {}
        for path in self.files():
            entry = found.get(path) if found else None
            for name in (joined_names(entry[1].get(fact, "")) if entry is not None
                         else self.text_fact(path, fact, names) or ()):
                index.setdefault(name, []).append(path)
        return index

    def build_indexes(self, found: Mapping[Path, IndexFacts] | None = None) -> None:
        """Make the two project-wide indexes now (who may call a name, who may write an
        attribute on another object): in a process about to fork analysing workers, which
        then inherit them instead of each scanning the project's text for itself.

        `found`: the files' `index_facts`, read by other processes (the screening workers);
        those are kept by path in the store as `text_fact` keeps its own, and the files not
        in it are read here."""
        if found and self.store.keeps_paths:
            for path, (read_as, facts) in found.items():
                self.store.keep_path_facts(path, read_as, {
                    name: joined_names(joined) for name, joined in facts.items()})
        self._calling = self.index_of("calls", called_names, found)
        self._written = self.index_of("written", written_attribute_names, found)

    def own_index_facts(self, paths: list[Path]) -> dict[Path, IndexFacts]:
        """`index_facts` of files read here, for `build_indexes`."""
        found = {}
        for path in paths:
            text, read_as = self.signed_text(path)
            found[path] = index_facts(text, list(read_as) if read_as is not None else None)
        return found

    # -- the phase of a row and of a function ------------------------------------------------
    def when(self, path: Path, function: str, row: int) -> When:
        """The phase of code on `row` of `function` (a qualified name, "" at module level)."""
        key = function_key(function)
        summary = self.summary(path)
        found = summary.functions.get(key) if summary is not None else None
        if found is not None and found.driver:
            via = key or None
            if any(start <= row < end for start, end in found.windows):
                return When(Phase.STEP, Because.TRAINING, via)
            return When(Phase.CONFIGURATION, Because.BETWEEN_STEPS, via)
        if not key:
            return When(Phase.CONFIGURATION, Because.MODULE_LEVEL, None)
        return self.function_when(path, key) or When(Phase.STEP, Because.UNCALLED, key)

    def function_when(self, path: Path, qualname: str) -> When | None:
        """The phase of a function's body (None while it is being worked out: a cycle)."""
        key = (path, qualname)
        if key in self._functions:
            return self._functions[key]
        self._functions[key] = None
        self._functions[key] = answer = self.compute(path, qualname)
        return answer

    def compute(self, path: Path, qualname: str) -> When:
        summary = self.summary(path)
        function = summary.functions.get(qualname) if summary is not None else None
        name = qualname.rsplit(".", 1)[-1]
        if name in SETUP_METHODS:
            return When(Phase.CONFIGURATION, Because.SETUP, qualname)
        if function is not None and function.is_property_setter:
            return When(Phase.CONFIGURATION, Because.SETTER, qualname)
        if function is not None and function.cls is not None and name == "forward":
            return When(Phase.FORWARD, Because.FORWARD, qualname)
        found: list[When] = []
        if summary is not None and function is not None and function.cls is not None \
                and name == "backward" and self.is_autograd_function(summary, function.cls):
            found.append(When(Phase.BACKWARD_HOOK, Because.BACKWARD_HOOK, qualname))
        for _, registration in self.hook_registrations(path, qualname, function):
            if registration.kind == "forward":
                return When(Phase.FORWARD, Because.FORWARD_HOOK, qualname)
            found.append(When(Phase.BACKWARD_HOOK, Because.BACKWARD_HOOK, qualname))
        for other, site in self.callers(path, qualname, function):
            caller = self.caller_when(other, site)
            if caller is None:
                continue
            if caller.because == Because.UNCALLED:
                caller = When(Phase.CONFIGURATION, Because.ENTRY_POINT, caller.via)
            if caller.phase == Phase.FORWARD:
                return caller
            found.append(caller)
        if found:
            return max(found, key=lambda when: PRIORITY[when.phase])
        return self.by_name(qualname, function)

    @staticmethod
    def by_name(qualname: str, function: FunctionSummary | None) -> When:
        """The phase of a function nothing in the project calls, from its name."""
        name = qualname.rsplit(".", 1)[-1]
        if is_setter_name(name):
            return When(Phase.CONFIGURATION, Because.SETTER, qualname)
        if function is not None and function.cls is not None:
            if name in FRAMEWORK_STEP_METHODS:
                return When(Phase.STEP, Because.TRAINING, qualname)
            if name in FRAMEWORK_BETWEEN_STEPS:
                return When(Phase.CONFIGURATION, Because.BETWEEN_STEPS, qualname)
        return When(Phase.STEP, Because.UNCALLED, qualname)

    def caller_when(self, path: Path, site: CallSite) -> When | None:
        """The phase of a call site (None for a caller still being worked out)."""
        summary = self.summary(path)
        caller = summary.functions.get(site.caller) if summary is not None else None
        if caller is not None and caller.driver or not site.caller:
            return self.when(path, site.caller, site.row)
        return self.function_when(path, site.caller)

    @staticmethod
    def is_autograd_function(summary: FileSummary, cls: str) -> bool:
        """`cls` derives from a class named `Function` (`torch.autograd.Function`), directly
        or through classes of the same file."""
        pending, seen = [cls], set()
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            for base in summary.classes.get(current, ()):
                if base == "Function":
                    return True
                pending.extend(q for q in summary.classes if q.rsplit(".", 1)[-1] == base)
        return False

    # -- who calls a function ----------------------------------------------------------------
    def callers(self, path: Path, qualname: str,
                function: FunctionSummary | None) -> list[tuple[Path, CallSite]]:
        name = qualname.rsplit(".", 1)[-1]
        found: list[tuple[Path, CallSite]] = []
        if name.startswith("__") and name.endswith("__"):
            return found  # called by Python itself (`obj(...)`, `with obj:`), not by name
        calling = self.files_calling(name)
        self.summarize_shared(calling)
        for other in calling:
            summary, sites = self.calls_of(other, name)
            for site in sites:
                if self.matches(path, qualname, function, other, summary, site):
                    found.append((other, site))
        return found

    def summarize_shared(self, paths: list[Path]) -> None:
        """While workers share the store: make the files' summaries first, in an order of
        this process's own, so that workers asking for the same files at the same time
        make each about once (each finds most of the other's made), not each all of them.
        The answers, read afterwards in the files' order, do not depend on it."""
        if self.store.shared and len(paths) > 1:
            order = list(paths)
            random.Random(os.getpid()).shuffle(order)
            for path in order:
                self.summary(path)

    def calls_of(self, path: Path, name: str) -> tuple[FileSummary, list[CallSite]]:
        """A file's summary and its calls of `name`; a stored summary whose entry for the
        name has the wrong shape is replaced by the file's summary made again."""
        summary = self.summary(path)
        if summary is None:
            return FileSummary(), []
        try:
            return summary, summary.calls.get(name, [])
        except ShapeError:
            text = self.text(path)
            summary = self._summaries[path] = summarize(text) if text is not None else None
            return (summary, summary.calls.get(name, [])) if summary else (FileSummary(), [])

    def hook_registrations(self, path: Path, qualname: str, function: FunctionSummary | None):
        name = qualname.rsplit(".", 1)[-1]
        for other in self.files_calling(name):
            if name not in self.hook_argument_words(other):
                continue  # not named by a registration: the file need not be summarized
            summary = self.summary(other)
            if summary is None:
                continue
            for registration in summary.hooks.get(name, []):
                site = CallSite(name, registration.receiver, registration.row,
                                registration.caller)
                if self.matches(path, qualname, function, other, summary, site,
                                any_method=True):
                    yield other, registration

    def hook_argument_words(self, path: Path) -> frozenset[str]:
        """`hook_argument_words` of a file's text, once per file per run."""
        if path not in self._hook_words:
            self._hook_words[path] = hook_argument_words(self.text(path) or "")
        return self._hook_words[path]

    def matches(self, path: Path, qualname: str, function: FunctionSummary | None,
                other: Path, summary: FileSummary, site: CallSite,
                any_method: bool = False) -> bool:
        """Whether `site` (in the file `other`) may call the function `qualname` of `path`."""
        if other == path and site.caller == qualname:
            return False  # recursion
        name = qualname.rsplit(".", 1)[-1]
        cls = function.cls if function is not None else None
        if cls is not None:  # a method
            if site.receiver in ("self", "super"):
                caller = summary.functions.get(site.caller)
                caller_class = caller.cls if caller is not None else None
                return caller_class is not None and self.related(path, cls, other,
                                                                 caller_class)
            if site.receiver == "other":
                if self.outside_project(site.module):
                    return False  # `ImageOps.invert(...)`: a module or class not the project's
                return any_method or (name not in GENERIC_METHODS and not is_mutator(name))
            return False
        if "." in qualname:  # a nested function: called by name inside its parent
            parent = qualname.rsplit(".", 1)[0]
            return (site.receiver == "bare" and other == path
                    and (site.caller == parent or site.caller.startswith(f"{parent}.")))
        if site.receiver == "bare":
            if other == path:
                return True
            imported = summary.imports.get(name, "")
            return imported.rsplit(".", 1)[-1] == name and imported != name
        if site.receiver == "other" and site.module:
            own, module = self.module_name(path), site.module.lstrip(".")
            return bool(own) and (module == own or own.endswith(f".{module}"))
        return False

    def outside_project(self, module: str) -> bool:
        """Whether a call site's receiver names, through an absolute import, a module outside
        the project (`from PIL import ImageOps`): its top name is no folder or module name on
        the project's files' paths. (A relative import's, "." first, is the project's own.)"""
        if not module or module.startswith("."):
            return False
        if self._path_names is None:
            self._path_names = frozenset(part for path in self.files()
                                         for part in (*path.parent.parts, path.stem))
        return module.split(".", 1)[0] not in self._path_names

    def related(self, path: Path, cls: str, other: Path, other_cls: str) -> bool:
        """The classes are one, or one derives from the other (by name, through bases of
        their own files)."""
        mine, theirs = self.lineage(path, cls), self.lineage(other, other_cls)
        return bool(mine & theirs) and (cls.rsplit(".", 1)[-1] in theirs
                                        or other_cls.rsplit(".", 1)[-1] in mine)

    def lineage(self, path: Path, cls: str) -> set[str]:
        """The class's name and its base names, through bases defined in the same file."""
        summary = self.summary(path)
        names: set[str] = set()
        pending = [cls]
        while pending:
            current = pending.pop()
            short = current.rsplit(".", 1)[-1]
            if short in names:
                continue
            names.add(short)
            bases = summary.classes.get(current, ()) if summary is not None else ()
            for base in bases:
                local = [q for q in (summary.classes if summary else ()) if
                         q.rsplit(".", 1)[-1] == base]
                pending.extend(local or [base])
        return names

    # -- writes to other objects' attributes ----------------------------------------------------
    def attribute_writes(self, attr: str,
                         classes: frozenset[str]) -> list[tuple[Path, AttributeWrite]]:
        """`R.attr = ...` and the like, with `R` not the writer's own `self`, project-wide, in
        the files that may write it on an instance of one of `classes`: those naming one of
        them (a receiver's class is known only from names in its file) or writing it on an
        element of a collection (`blocks[0].attr = ...`, `for b in blocks: b.attr = ...`)."""
        key = (attr, classes)
        if key not in self._writes:
            self._writes[key] = [
                (path, write) for path in self.written_attributes().get(attr, [])
                if (text := self.text(path)) is not None
                and (any(name in text for name in classes)
                     or self.writes_on_element(path, text, attr))
                and (summary := self.summary(path)) is not None
                for write in summary.attribute_writes.get(attr, [])]
        return self._writes[key]

    def writes_on_element(self, path: Path, text: str, attr: str) -> bool:
        """`element_write` for the file and attribute, once per run whatever the classes
        asked about."""
        key = (path, attr)
        if key not in self._element_writes:
            if path not in self._for_clauses:
                self._for_clauses[path] = for_clauses(text)
            self._element_writes[key] = element_write(text, element_write_pattern(attr),
                                                      self._for_clauses[path])
        return self._element_writes[key]

    def written_attributes(self) -> dict[str, list[Path]]:
        """Attribute name -> the project files whose text may write it on another object:
        one scan of the project's text per run, whatever the number of attributes asked."""
        if self._written is None:
            self._written = self.index_of("written", written_attribute_names)
        return self._written
