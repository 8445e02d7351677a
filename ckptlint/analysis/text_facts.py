"""The facts behind the phases' two project-wide indexes, read from a file's text alone: the
names it may call or pass as an argument, and the attributes it may write on another object
(`PhaseFinder.calling_index`, `PhaseFinder.written_attributes`). Cheap supersets, made
precise by the files' `ast` summaries.

Light on purpose (no libcst): the workers that screen a run's files read them for the main
process (`index_facts_of_files`), from the file, with the stat signature the summary store
keeps facts by path under (`SummaryStore.keep_path_facts`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ckptlint.analysis.mutators import is_mutator
from ckptlint.analysis.project import scanned_text
from ckptlint.storage.plain_data import want_strs
from ckptlint.syntax.reading import full_text

# `.attr = `, `.attr[k] += `, `.attr.b = `, `.attr.append(` and the like: the attribute
# (group 1) and, for a method called on it, the method (group 2).
ASSIGN_OPERATOR = r"(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)"
ATTRIBUTE_WRITE = re.compile(
    rf"\.(\w+)(?=[ \t]*(?:\[[^\]\n]*\][ \t]*)?{ASSIGN_OPERATOR}"
    rf"|\.\w+[ \t]*{ASSIGN_OPERATOR}|\.(\w+)[ \t]*\()")
OWN_RECEIVER = re.compile(r"(?:^|[^\w.])(?:self|cls)$")


def written_attribute_names(text: str) -> set[str]:
    """Attributes the text may change on an object other than its own `self`/`cls`: a cheap
    superset, made precise by the file's summary."""
    found: set[str] = set()
    for match in ATTRIBUTE_WRITE.finditer(text):
        method = match.group(2)
        if method is not None and not is_mutator(method):
            continue
        start = match.start()
        if OWN_RECEIVER.search(text, max(0, start - 5), start):
            continue
        found.add(match.group(1))
    return found


# A name called (`name(`, not `def name(`) or passed as an argument (`f(x, name)`,
# `f(key=obj.name)`): what `PhaseFinder.files_calling` looks up.
# Possessive (`++`, `*+`): a word never matches in part, so giving characters back can never
# help; not trying is a third faster over a project's texts.
# The called names are searched for in the reversed text, each found reversed back: there
# the pattern starts with the literal `(`, which the engine skips to, where
# `\b(?<!def )(\w++)\s*+\(` in the text itself is tried at every word (nine times slower
# over diffusers and torch, the same names).
CALLED_NAME_REVERSED = re.compile(r"\(\s*+(\w++)(?! fed)")
PASSED_NAME = re.compile(r"[(,=]\s*+(?:\w++\.)?(\w++)(?=\s*[,)])")


def called_names(text: str) -> set[str]:
    """Names the text may call or pass as an argument: a cheap superset, made precise by the
    file's summary."""
    return {*(name[::-1] for name in CALLED_NAME_REVERSED.findall(text[::-1])),
            *PASSED_NAME.findall(text)}


def sorted_names(names: set[str]) -> list[str]:
    return sorted(names)


def name_set(data: object) -> set[str]:
    return set(want_strs(data, "names"))


# Fact name (as the summary store keeps it by path) -> how it is read from a text.
INDEX_FACTS: dict[str, Callable[[str], set[str]]] = {
    "calls": called_names, "written": written_attribute_names}

# What a file gives the indexes: its stat signature as read (None: unknown), and each fact
# of `INDEX_FACTS` as its names, sorted, in one string joined by newlines (none for a file
# without text). One string a fact, not a list of names: the main process receives these for
# every project file at once, and thousands of small strings freed together would leave its
# heap in holes that the analysing workers it forks next copy page by page.
IndexFacts = tuple[list[int] | None, dict[str, str]]


def index_facts(text: str | None, read_as: list[int] | None) -> IndexFacts:
    """A text's `INDEX_FACTS`, as `PhaseFinder.text_fact` would make them."""
    if not text:
        return read_as, {}
    return read_as, {name: "\n".join(sorted_names(read(text)))
                     for name, read in INDEX_FACTS.items()}


def joined_names(joined: str) -> list[str]:
    """The names `index_facts` joined."""
    return joined.split("\n") if joined else []


def index_facts_of_files(paths: list[str]) -> list[IndexFacts]:
    """Each file's `index_facts`, read from disk as the project reads a text to scan it (in
    a worker: nothing is kept)."""
    answers = []
    for path in paths:
        kept, read_as = scanned_text(path)
        answers.append(index_facts(full_text(kept) if kept is not None else None,
                                   list(read_as) if read_as is not None else None))
    return answers
