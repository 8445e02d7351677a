"""Streaming a log for checkpoint errors, in bounded memory.

The log is read in lines of at most `MAX_LINE` bytes, decoded as UTF-8 with undecodable bytes
replaced, and `\\r` (progress bars) also ends a line. A `CheckpointError` line opens a block;
the lines after it that continue torch's message (tensor lines, tensor counts) are read into
it. The text before the exception name is the block's prefix: `[rank0]: ` and `[rank1]: `
output may interleave, and a logger's prefix on the first line only is no obstacle
(`Scanner.continues_a_block`).

The same error seen again (both ranks, the traceback and a logger) is counted, not repeated;
at most `MAX_DISTINCT` distinct errors and `MAX_TENSORS_KEPT` tensor lines per error are kept,
while every tensor line is still classified and every error counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ckptlint.explain.errors import (
    DEBUG_DUMP_TEXT,
    KIND_TEXTS,
    ErrorKind,
    TensorMismatch,
    kind_of,
    parse_metadata,
)
from ckptlint.explain.signatures import (
    SIGNATURES,
    TEXT_SIGNATURES,
    Signature,
    signature_in_text,
    signature_of_error,
    signature_of_tensor,
)

MAX_LINE = 64 * 1024
MAX_DISTINCT = 500
MAX_TENSORS_KEPT = 32
MAX_MESSAGE = 500

_EXCEPTION = re.compile(r"(?<![\w.])(?:\w+\.)*CheckpointError:[ \t]*(.*)$")
_MESSAGE_PREFIX = "torch.utils.checkpoint: "
_EXCEPTION_NAME = re.compile(r"(?<![\w.])(?:\w+\.)*\w*(?:Error|Warning|Exception): ")
_TRIGGER = re.compile("|".join(
    [r"CheckpointError:", *(re.escape(text) for _, text in KIND_TEXTS),
     *(signature.text.pattern for signature in TEXT_SIGNATURES if signature.text)]))
_POSITION = re.compile(r"^\s*tensor at position (\d+):\s*$")
_SAVED = re.compile(r"^\s*saved metadata: (\{.*\})\s*$")
_RECOMPUTED = re.compile(r"^\s*recomputed metadata: (\{.*\})\s*$")
_FORWARD_COUNT = re.compile(r"^\s*Number of tensors saved during forward: (\d+)")
_REPLAY_COUNT = re.compile(r"^\s*Number of tensors saved during recomputation: (\d+)")


@dataclass
class FoundError:
    """One distinct checkpoint error: where it was first seen and what it says."""

    line: int
    kind: ErrorKind
    message: str
    tensors: list[tuple[TensorMismatch, Signature | None]] = field(default_factory=list)
    tensor_count: int = 0
    saved_counts: tuple[int | None, int | None] = (None, None)
    signatures: list[Signature] = field(default_factory=list)
    occurrences: int = 1

    @property
    def classified(self) -> bool:
        return bool(self.signatures)

    def key(self) -> tuple:
        return (self.kind, self.message, self.saved_counts, self.tensor_count,
                tuple(mismatch for mismatch, _ in self.tensors))

    def add_signature(self, signature: Signature | None) -> None:
        if signature is not None and signature not in self.signatures:
            self.signatures.append(signature)
            self.signatures.sort(key=SIGNATURES.index)


@dataclass
class Block:
    """An error whose message continues on the following lines."""

    error: FoundError
    prefix: str
    # Continued by lines carrying the prefix (True), by lines without it (False), or not
    # known before its first continuation line (None).
    tagged: bool | None = None
    awaiting_message: bool = False  # the exception line ended at "CheckpointError:"
    debug_dump: bool = False
    position: int | None = None
    saved_text: str | None = None


@dataclass
class ScanResult:
    errors: list[FoundError] = field(default_factory=list)
    total: int = 0  # every error seen, repeats included
    unclassified: int = 0  # distinct errors no signature explains, kept or not
    not_kept: int = 0  # distinct errors beyond MAX_DISTINCT (counted, not listed)


def log_lines(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for each line; `\\r` splits a line as well."""
    number = 1
    while chunk := stream.readline(MAX_LINE):
        text = chunk.decode("utf-8", errors="replace").rstrip("\n")
        for part in text.split("\r"):
            if part:
                yield number, part
        if chunk.endswith(b"\n"):
            number += 1


def in_source_string(before: str) -> bool:
    """Whether a text follows an opening quote: a traceback showing the source that raises
    it, not the error itself."""
    return before.endswith(("\"", "'"))


class Scanner:
    def __init__(self) -> None:
        self.result = ScanResult()
        self.distinct: dict[tuple, FoundError] = {}
        self.open: dict[str, Block] = {}

    def feed(self, number: int, line: str) -> None:
        if not self.continues_a_block(line) and _TRIGGER.search(line):
            self.start(number, line)

    def continues_a_block(self, line: str) -> bool:
        """Read `line` into the open block it continues, if any; close the blocks it ends.

        A block whose first line had a prefix is continued either by lines with that same
        prefix (`[rank0]: `: other prefixes are other ranks, and leave it open) or by lines
        without it (a logger's timestamp on the first line only): its first continuation
        line decides which, and from then on a line of that form that does not continue it
        ends it. A block without a prefix ends at the first line that does not continue it.
        """
        blocks = list(reversed(self.open.values()))  # the latest first
        for block in blocks:
            if block.prefix and block.tagged is not False and line.startswith(block.prefix):
                if self.continue_block(block, line[len(block.prefix):]):
                    block.tagged = True
                    return True
                self.close(block.prefix)
        for block in blocks:
            if block.tagged is not True and block.prefix in self.open:
                if self.continue_block(block, line):
                    block.tagged = False
                    return True
        for block in blocks:
            if block.prefix in self.open and (not block.prefix or block.tagged is False):
                self.close(block.prefix)
        return False

    def finish(self) -> ScanResult:
        for prefix in list(self.open):
            self.close(prefix)
        self.result.errors.sort(key=lambda error: error.line)
        return self.result

    def start(self, number: int, line: str) -> None:
        exception = _EXCEPTION.search(line)
        if exception:
            prefix, message = line[:exception.start()], exception.group(1).strip()
        else:
            start = next((line.find(text) for _, text in KIND_TEXTS if text in line), -1)
            if start < 0:
                self.record_message(number, line)
                return
            prefix, message = line[:start], line[start:]
            if prefix.endswith(_MESSAGE_PREFIX):
                prefix = prefix[:-len(_MESSAGE_PREFIX)]
            if in_source_string(prefix):
                return
        error = FoundError(number, ErrorKind.OTHER_CHECKPOINT_ERROR, "")
        block = Block(error, prefix, awaiting_message=not message)
        self.set_message(block, message)
        if prefix in self.open:
            self.close(prefix)
        self.open[prefix] = block

    def record_message(self, number: int, line: str) -> None:
        signature = signature_in_text(line)
        if signature is None or signature.text is None:
            return
        found = signature.text.search(line)
        start = found.start() if found else 0
        if in_source_string(line[:start]):
            return
        named = _EXCEPTION_NAME.search(line, 0, start)
        start = named.start() if named else start
        error = FoundError(number, ErrorKind.MESSAGE, line[start:].strip()[:MAX_MESSAGE])
        error.add_signature(signature)
        self.record(error)

    def set_message(self, block: Block, message: str) -> None:
        message = message.removeprefix(_MESSAGE_PREFIX)
        # The debug dump wraps an error printed above it: that one is explained.
        block.debug_dump = DEBUG_DUMP_TEXT in message
        block.error.message = message[:MAX_MESSAGE]
        block.error.kind = kind_of(message)

    def continue_block(self, block: Block, text: str) -> bool:
        """Whether `text` continues the block's message (then it is read into it)."""
        error = block.error
        if block.awaiting_message:
            block.awaiting_message = False
            self.set_message(block, text.strip())
            return True
        if error.kind is ErrorKind.METADATA_MISMATCH:
            return self.read_tensor_line(block, text)
        if error.kind is ErrorKind.COUNT_MISMATCH:
            forward, replay = error.saved_counts
            if match := _FORWARD_COUNT.match(text):
                error.saved_counts = (int(match.group(1)), replay)
                return True
            if match := _REPLAY_COUNT.match(text):
                error.saved_counts = (forward, int(match.group(1)))
                return True
        return False

    def read_tensor_line(self, block: Block, text: str) -> bool:
        if match := _POSITION.match(text):
            block.position, block.saved_text = int(match.group(1)), None
            return True
        if block.position is None:
            return False
        if match := _SAVED.match(text):
            block.saved_text = match.group(1)
            return True
        if (match := _RECOMPUTED.match(text)) and block.saved_text is not None:
            mismatch = TensorMismatch(block.position, parse_metadata(block.saved_text),
                                      parse_metadata(match.group(1)))
            signature = signature_of_tensor(mismatch)
            block.error.add_signature(signature)
            block.error.tensor_count += 1
            if len(block.error.tensors) < MAX_TENSORS_KEPT:
                block.error.tensors.append((mismatch, signature))
            block.position = block.saved_text = None
            return True
        return False

    def close(self, prefix: str) -> None:
        block = self.open.pop(prefix)
        if block.debug_dump:  # nothing of its own to explain
            return
        error = block.error
        if error.kind is not ErrorKind.METADATA_MISMATCH:
            error.add_signature(signature_of_error(error.kind))
        elif whole := [signature for signature in error.signatures if signature.whole_error]:
            error.signatures = whole
        self.record(error)

    def record(self, error: FoundError) -> None:
        self.result.total += 1
        key = error.key()
        if key in self.distinct:
            self.distinct[key].occurrences += 1
            return
        if not error.classified:
            self.result.unclassified += 1
        if len(self.result.errors) >= MAX_DISTINCT:
            self.result.not_kept += 1
            return
        self.distinct[key] = error
        self.result.errors.append(error)


def scan(stream: BinaryIO) -> ScanResult:
    scanner = Scanner()
    for number, line in log_lines(stream):
        scanner.feed(number, line)
    return scanner.finish()
