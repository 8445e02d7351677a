"""`python -m ckptlint.dev new-rule CKPnnn rule-name`: a new rule, wired in and passing.

Writes the rule module (ckptlint/checks/<rule_name>.py), its page (rules/CKPnnn-rule-name.md),
its fixture (tests/fixtures/ckpnnn_<rule_name>.py) and its registry entry (with the fields of
its findings' data), then regenerates the README's rule table and the JSON Schema of the
output. What it writes works from the start: the rule runs, its page's
Example produces the code and "Use instead" nothing, the fixture's annotation matches. It
flags a placeholder (`ckptlint_scaffold_example`) until the real test is written, and every
text to replace says "scaffold placeholder"; tests/test_registry.py fails while any is left.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ckptlint import registry
from ckptlint.dev import DevError
from ckptlint.dev.rule_table import update as update_table
from ckptlint.finding_data import CALL, SEGMENT, STR
from ckptlint.rule_pages import SECTIONS, page_name

PLACEHOLDER = "scaffold placeholder"
EXAMPLE = "ckptlint_scaffold_example"  # what the generated rule flags
CODE = re.compile(r"^CKP\d{3}$")
NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
DEFAULT_DYNAMIC = {"site": registry.Dynamic.STATIC_ONLY,
                   "segment": registry.Dynamic.REPLAY_COMPARE}
# The fields of the placeholder's data, as registry source and as the shape it denotes.
DATA = {"site": ('CALL.with_fields({"keyword": STR})', CALL.with_fields({"keyword": STR})),
        "segment": ('SEGMENT.with_fields({"call": STR})', SEGMENT.with_fields({"call": STR}))}
REGISTRY_ENTRY = re.compile(r'^        RuleInfo\("(CKP\d{3})"', re.M)
ENTRY_INDENT = " " * 17  # continuation lines of an entry, under `RuleInfo(`


@dataclass(frozen=True)
class NewRule:
    code: str
    name: str
    severity: str
    kind: str  # "site" | "segment"
    dynamic: registry.Dynamic
    summary: str

    @property
    def module_name(self) -> str:
        return self.name.replace("-", "_")

    @property
    def class_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("-"))

    @property
    def implementation(self) -> str:
        return f"ckptlint.checks.{self.module_name}:{self.class_name}"

    def info(self) -> registry.RuleInfo:
        return registry.RuleInfo(self.code, self.name, self.severity, self.dynamic,
                                 registry.FixKind.NONE, self.implementation, self.summary,
                                 DATA[self.kind][1])


def new_rule(root: Path, rule: NewRule) -> list[Path]:
    """Write the rule's files and registry entry under `root`; the paths written."""
    check_new(rule)
    module = root / "ckptlint" / "checks" / f"{rule.module_name}.py"
    page = root / "rules" / page_name(rule.info())
    fixture = root / "tests" / "fixtures" / f"{rule.code.lower()}_{rule.module_name}.py"
    for path in (module, page, fixture):
        if path.exists():
            raise DevError(f"{path} already exists")
    registry_path = root / "ckptlint" / "registry.py"
    registry_text = with_entry(registry_path.read_text(encoding="utf-8"), rule)
    rules = load_rules(registry_text)  # before writing anything: the new entry must load
    module.write_text(MODULES[rule.kind].format(**fields(rule)), encoding="utf-8")
    page.write_text(page_text(rule), encoding="utf-8")
    fixture.write_text(FIXTURES[rule.kind].format(**fields(rule)), encoding="utf-8")
    registry_path.write_text(registry_text, encoding="utf-8")
    update_table(root, rules, check=False)
    schema = subprocess.run([sys.executable, str(root / "scripts" / "findings_schema.py")],
                            cwd=root, capture_output=True, text=True)
    if schema.returncode != 0:
        raise DevError(f"scripts/findings_schema.py failed: {schema.stderr.strip()}")
    return [module, page, fixture, registry_path, root / "README.md",
            root / "docs" / "schema" / "findings.schema.json"]


def check_new(rule: NewRule) -> None:
    if not CODE.match(rule.code):
        raise DevError(f"`{rule.code}` is not a rule code (CKP and three digits)")
    if rule.code in registry.RULES:
        raise DevError(f"{rule.code} is taken ({registry.RULES[rule.code].name})")
    if not rule.summary.strip() or "\n" in rule.summary or '"""' in rule.summary:
        raise DevError("the summary must be one line of text")
    if not NAME.match(rule.name):
        raise DevError(f"`{rule.name}` is not a rule name (lower-case words joined by `-`)")
    taken = [info.code for info in registry.RULES.values() if info.name == rule.name]
    if taken:
        raise DevError(f"the name `{rule.name}` is taken ({taken[0]})")


def with_entry(text: str, rule: NewRule) -> str:
    """The registry's text with the rule's entry inserted in code order."""
    later = [match for match in REGISTRY_ENTRY.finditer(text) if match.group(1) > rule.code]
    if not later:
        raise DevError("ckptlint/registry.py: no entry found to insert the new one before")
    at = later[0].start()
    return text[:at] + entry_text(rule) + text[at:]


def entry_text(rule: NewRule) -> str:
    head = (f'        RuleInfo("{rule.code}", "{rule.name}", "{rule.severity}", '
            f"{rule.dynamic.name}, NO_FIX,\n")
    lines = [f'{ENTRY_INDENT}"{rule.implementation}",']
    chunks = textwrap.wrap(rule.summary, width=100 - len(ENTRY_INDENT) - 6)
    for index, chunk in enumerate(chunks):
        last = index == len(chunks) - 1
        literal = json.dumps(chunk if last else chunk + " ")
        lines.append(f"{ENTRY_INDENT}{literal}{',' if last else ''}")
    lines.append(f"{ENTRY_INDENT}{DATA[rule.kind][0]}),")
    return head + "\n".join(lines) + "\n"


def load_rules(registry_text: str) -> dict[str, registry.RuleInfo]:
    """RULES of a registry's text, loaded apart from the registry this process uses."""
    name = "ckptlint_new_registry"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up while they are built)
    try:
        exec(compile(registry_text, "ckptlint/registry.py", "exec"), module.__dict__)
    except Exception as error:  # noqa: BLE001 - reported as one line
        raise DevError(f"ckptlint/registry.py with the new entry does not load: {error}") from None
    finally:
        del sys.modules[name]
    return module.RULES


def fields(rule: NewRule) -> dict[str, str]:
    return {"code": rule.code, "name": rule.name, "summary": rule.summary,
            "sentence": rule.summary[:1].upper() + rule.summary[1:].rstrip("."),
            "class_name": rule.class_name, "example": EXAMPLE, "placeholder": PLACEHOLDER}


def page_text(rule: NewRule) -> str:
    bodies = {title: paragraph(body.format(**fields(rule)))
              for title, body in PAGE_SECTIONS[rule.kind].items()}
    missing = [title for title in SECTIONS if title not in bodies]
    if missing:
        raise DevError(f"the page template has no text for {missing}")
    parts = [f"# {rule.code}: {rule.name}"]
    parts += [f"## {title}\n\n{bodies[title]}" for title in SECTIONS]
    return "\n\n".join(parts) + "\n"


def paragraph(text: str) -> str:
    """Prose wrapped as the pages wrap it; code blocks, lists and tables as they are."""
    blocks = [block.strip() for block in text.strip().split("\n\n")]
    return "\n\n".join(block if block.startswith(("```", "- ", "|")) or "```" in block
                        else textwrap.fill(block, width=96) for block in blocks)


SITE_MODULE = '''\
"""{code}: {summary}"""

from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.sites import Site, bool_value
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding

# ({placeholder}: what the rule flags until its real test is written)
EXAMPLE_KEYWORD = "{example}"


class {class_name}(SiteRule):
    """{summary}"""

    code = "{code}"
    message = ("checkpoint called with `{{keyword}}=True` "
               "({placeholder}: what goes wrong, and what to do instead)")

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.arguments is None:
            return
        given = site.arguments.keywords.get(EXAMPLE_KEYWORD)
        if given is not None and bool_value(given.value) is True:
            yield self.site_finding(site, {{"keyword": EXAMPLE_KEYWORD}})
'''

SEGMENT_MODULE = '''\
"""{code}: {summary}"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.segment import Segment
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding

# ({placeholder}: what the rule flags until its real test is written)
EXAMPLE_FUNCTION = "{example}"


class {class_name}(SegmentRule):
    """{summary}"""

    code = "{code}"
    message = ("checkpointed code calls `{{call:short}}` "
               "({placeholder}: what goes wrong in the replay, and what to do instead)")

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for call in facts.calls:
                func = call.node.func
                if isinstance(func, cst.Name) and func.value == EXAMPLE_FUNCTION:
                    yield self.at(segment, reached, call.node,
                                  {{"call": source_text(reached.module, call.node)}})
'''

SITE_FIXTURE = '''\
"""{code} ({name}): what is reported, and look-alikes that are not.

({placeholder}: the cases of the rule, each reported line annotated with its column.)
"""

from torch.utils.checkpoint import checkpoint


def block(h, **options):
    return h


def forward(x):
    h = checkpoint(block, x, use_reentrant=False, {example}=True)  # error: {code}:9
    return checkpoint(block, h, use_reentrant=False, {example}=False)
'''

SEGMENT_FIXTURE = '''\
"""{code} ({name}): what is reported, and look-alikes that are not.

({placeholder}: the cases of the rule, each reported line annotated with its column.)
"""

from torch.utils.checkpoint import checkpoint


def {example}(h):
    return h


def block(h):
    return {example}(h)  # error: {code}:12


def quiet(h):
    return h


def forward(x):
    h = checkpoint(block, x, use_reentrant=False)
    return checkpoint(quiet, h, use_reentrant=False)
'''

COMMON_SECTIONS = {
    "What it does": "{sentence}. ({placeholder}: what exactly is reported, and what is not.)",
    "Why is this bad?": "({placeholder}: what goes wrong when the checkpoint replays this, "
                        "and the torch behaviour behind it.)",
    "Fix safety": "No automatic fix.",
    "References": "- [torch.utils.checkpoint](https://pytorch.org/docs/stable/checkpoint.html)",
}

DATA_INTRO = """
In `--format json` (and SARIF's `properties.data`) each finding carries `data`, the facts
its message is rendered from. Read these fields, never the message: its wording may
change, the fields stay (more may be added). Schema: `docs/schema/findings.schema.json`.

| Field | Type | Meaning |
|---|---|---|"""

PAGE_SECTIONS = {
    "site": {
        **COMMON_SECTIONS,
        "Example": '''
```python
from torch.utils.checkpoint import checkpoint


def block(h, **options):
    return h


def forward(x):
    return checkpoint(block, x, use_reentrant=False, {example}=True)
```
''',
        "Use instead": '''
```python
from torch.utils.checkpoint import checkpoint


def block(h, **options):
    return h


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
```
''',
        "Options": "None.",
        "Finding data": DATA_INTRO + """
| `api` | string | qualified name of the checkpoint API (`torch.utils.checkpoint.checkpoint`) |
| `mode` | `"reentrant"` \\| `"non-reentrant"` \\| `"unknown"` | the checkpoint mode of this call |
| `keyword` | string | the keyword passed ({placeholder}) |
""",
    },
    "segment": {
        **COMMON_SECTIONS,
        "Example": '''
```python
from torch.utils.checkpoint import checkpoint


def {example}(h):
    return h


def block(h):
    return {example}(h)


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
```
''',
        "Use instead": '''
```python
from torch.utils.checkpoint import checkpoint


def block(h):
    return h


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
```
''',
        "Options": "- `max-depth`: how deep the segment is followed.",
        "Finding data": DATA_INTRO + """
| `call` | string | the call's source on one line ({placeholder}) |
| `hazard` | object, optional | `filename`, `row` of the hazard when the finding is reported \
at its checkpoint because the hazard's file was not linted |
""",
    },
}

MODULES = {"site": SITE_MODULE, "segment": SEGMENT_MODULE}
FIXTURES = {"site": SITE_FIXTURE, "segment": SEGMENT_FIXTURE}
