"""A minimal LSP client: runs the real `ckptlint server` as a process and speaks JSON-RPC over
its stdin and stdout, as an editor does (`Content-Length` framed messages). Used by
tests/test_server.py and bench/server_latency.py."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Message = dict[str, Any]


class LspClient:
    def __init__(self, command: list[str], cwd: Path, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.incoming: queue.Queue[tuple[float, Message]] = queue.Queue()
        self.seen: list[tuple[float, Message]] = []  # every message from the server, in order
        self.next_id = 0
        self.reader = threading.Thread(target=self.read_messages, daemon=True)
        self.reader.start()
        self.stderr: list[bytes] = []
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr),
                         daemon=True).start()

    # -- wire ------------------------------------------------------------------------------
    def read_messages(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = stream.read(length)
            self.incoming.put((time.perf_counter(), json.loads(body)))

    def send(self, message: Message) -> float:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()
        return time.perf_counter()

    def notify(self, method: str, params: Any) -> float:
        return self.send({"method": method, "params": params})

    def request(self, method: str, params: Any, timeout: float = 60) -> Any:
        self.next_id += 1
        number = self.next_id
        self.send({"id": number, "method": method, "params": params})
        _, reply = self.wait_for(lambda m: m.get("id") == number and "method" not in m,
                                 timeout, since=len(self.seen))
        assert "error" not in reply, reply
        return reply.get("result")

    def wait_for(self, wanted: Callable[[Message], bool], timeout: float = 60,
                 since: int = 0) -> tuple[float, Message]:
        """The first message from the server (from `seen[since]` on) that `wanted` accepts,
        with the time it arrived."""
        for arrived, message in self.seen[since:]:
            if wanted(message):
                return arrived, message
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no such message within {timeout} s; stderr: "
                                   f"{b''.join(self.stderr).decode(errors='replace')[-2000:]}")
            try:
                arrived, message = self.incoming.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append((arrived, message))
            if message.get("method") in ("window/workDoneProgress/create",
                                         "client/registerCapability") and "id" in message:
                self.send({"id": message["id"], "result": None})
            if wanted(message):
                return arrived, message

    def diagnostics(self, uri: str, since: int = 0, timeout: float = 60) -> Message:
        """The params of the first diagnostics published for `uri` after `seen[since]`."""
        return self.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                             and m["params"]["uri"] == uri, timeout, since)[1]["params"]

    def published(self, uri: str) -> list[Message]:
        """Every diagnostics list published for `uri` so far (received by now)."""
        self.drain()
        return [m["params"] for _, m in self.seen
                if m.get("method") == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri]

    def drain(self) -> None:
        while True:
            try:
                self.seen.append(self.incoming.get_nowait())
            except queue.Empty:
                return

    # -- the session -----------------------------------------------------------------------
    def initialize(self, root: Path, notebooks: bool = False) -> Any:
        capabilities: dict[str, Any] = {"textDocument": {
            "publishDiagnostics": {"relatedInformation": True, "codeDescriptionSupport": True},
            "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {
                "valueSet": ["quickfix"]}}}}}
        if notebooks:
            capabilities["notebookDocument"] = {"synchronization": {}}
        result = self.request("initialize", {"processId": None, "rootUri": root.as_uri(),
                                             "capabilities": capabilities})
        self.notify("initialized", {})
        return result

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": version, "text": text}})
        return uri

    def change(self, uri: str, text: str, version: int) -> float:
        return self.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"text": text}]})

    def close(self) -> int:
        try:
            self.request("shutdown", None, timeout=30)
            self.notify("exit", None)
            return self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
