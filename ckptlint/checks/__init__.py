"""The rules. Each module holds one rule; the engine finds them through `RULE_CLASSES`.

Listed by import path, from the registry (`ckptlint.registry`), so that nothing is imported
until a file needs checking. A rule class whose code is not registered is never run:
tests/test_registry.py fails on it.
"""

from ckptlint.registry import implementations

RULE_CLASSES = implementations()
