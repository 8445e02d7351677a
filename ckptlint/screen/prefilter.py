"""The first screen: a text test that only rejects files that cannot hold a checkpoint site."""

from __future__ import annotations

import re

from ckptlint.analysis.apis import api_table, trigger_names
from ckptlint.config import Config

_IDENTIFIER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class Prefilter:
    """A text test that only rejects files that cannot hold a checkpoint site: one of the
    trigger names must stand in it as a whole word, or it has a star import."""

    def __init__(self, config: Config) -> None:
        self.names = frozenset(trigger_names(api_table(dict(config.checkpoint_functions)),
                                             config.segment_base_classes))
        # Each name contains one of these: found by `str.find` (fast), each occurrence is
        # widened to the whole word around it, which must be a name.
        self.needles = tuple(sorted(
            name for name in self.names
            if not any(other != name and other in name for other in self.names)))

    def may_contain_site(self, text: str) -> bool:
        if has_star_import(text):
            return True  # `from M import *` may bind an API or a helper returning one
        word = _IDENTIFIER_CHARS
        size = len(text)
        for needle in self.needles:
            position = text.find(needle)
            while position >= 0:
                start, end = position, position + len(needle)
                while start and text[start - 1] in word:
                    start -= 1
                while end < size and text[end] in word:
                    end += 1
                if text[start:end] in self.names:
                    return True
                position = text.find(needle, end)
        return False


# Without a look-behind, so the regex engine can skip ahead to each literal `import`
# (a leading look-behind made it try every position: 25 times slower on torch's tree).
_STAR_IMPORT = re.compile(r"import(?:[ \t]|\\\r?\n)+\*")


def has_star_import(text: str) -> bool:
    """May the file hold `from M import *`? `import` as a whole word, then spaces, then `*`."""
    if "*" not in text:
        return False
    for match in _STAR_IMPORT.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        if not (before.isalnum() or before == "_"):
            return True
    return False
