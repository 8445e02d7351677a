"""Running one analysis in a process of its own: the editor's message loop never waits on it,
a newer edit kills it, and a crash (even of libcst's native parser) costs one answer, not the
server.

Children are forked by multiprocessing's fork server, a single-threaded process started once
(`warm_up`) with the analysis (libcst, the rules) imported, so each child starts with them
loaded and a fork costs milliseconds. (Forking the server itself is unsafe: pygls reads stdin
in a thread, and a child forked while that thread holds stdin's lock hangs closing it.)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Callable
from typing import Any


class AnalysisFailed(Exception):
    """The analysis raised, or its process died; the message says which and why."""


def child(connection, function: Callable[..., Any], args: tuple) -> None:
    os.dup2(2, 1)  # stdout carries the protocol: a stray print must not reach the editor
    try:
        outcome: tuple[bool, Any] = (True, function(*args))
    except BaseException as error:  # noqa: BLE001 - reported to the server as one failure
        outcome = (False, f"{error.__class__.__name__}: {error}")
    try:
        connection.send(outcome)
    finally:
        connection.close()
        os._exit(0)


CONTEXT = multiprocessing.get_context("forkserver")


def warm_up(modules: list[str]) -> None:
    """Start the fork server now, with `modules` imported in it."""
    from multiprocessing import forkserver

    # (Each child also runs the server's main module again, as multiprocessing does: the
    # console script, whose import of ckptlint.cli is then already done.)
    CONTEXT.set_forkserver_preload([*modules, "ckptlint.cli", "ckptlint.engine.run",
                                    "ckptlint.server.analysis"])
    forkserver.ensure_running()


async def run_isolated(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a forked child; AnalysisFailed when it raised or died. Cancelling
    the awaiting task kills the child."""
    receiver, sender = CONTEXT.Pipe(duplex=False)
    process = CONTEXT.Process(target=child, args=(sender, function, args), daemon=True)
    loop = asyncio.get_running_loop()
    process.start()
    sender.close()
    ready = asyncio.Event()
    loop.add_reader(receiver.fileno(), ready.set)
    try:
        await ready.wait()
        try:
            ok, value = receiver.recv()
        except (EOFError, OSError):
            process.join(5)
            raise AnalysisFailed(f"the analysis process died (exit status {process.exitcode})"
                                 ) from None
    except asyncio.CancelledError:
        process.kill()
        raise
    finally:
        loop.remove_reader(receiver.fileno())
        receiver.close()
        await loop.run_in_executor(None, process.join)
    if not ok:
        raise AnalysisFailed(value)
    return value
