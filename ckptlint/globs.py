"""gitignore-style globs (`exclude`, `extend-exclude`, `per-file-ignores`) as regular
expressions."""

from __future__ import annotations

import re
from functools import cache


@cache
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A gitignore-style glob as a regex over a relative POSIX path.

    A pattern without `/` matches a file or folder name at any depth; with `/` it is anchored
    to the config folder; `**` spans folders; a match on a folder covers everything below it.
    """
    anchored = "/" in pattern.rstrip("/")
    body = pattern.strip("/")
    out = []
    i = 0
    while i < len(body):
        char = body[i]
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if body.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = body.find("]", i)
            if end == -1:
                out.append(re.escape(char))
            else:  # a class never matches `/`; `[!...]` is its negation, as in gitignore
                members = body[i + 1:end]
                if members.startswith("!"):
                    members = "^" + members[1:]
                out.append(f"(?!/)[{members}]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    prefix = "" if anchored else "(?:.*/)?"
    return re.compile(f"^{prefix}{''.join(out)}(?:/.*)?$")


def glob_matches(pattern: str, relative_path: str) -> bool:
    return bool(glob_regex(pattern).match(relative_path))
