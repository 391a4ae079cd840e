"""A Python handle on memory-lancedb-pro's own code, run by node through ``plugin_driver.mjs``."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("plugin_driver.mjs")
INSTALL_ENV = "MEMORY_MCP_INTEROP_INSTALL"
ANSWER_TIMEOUT_S = 180.0  # the plugin's lock retries back off up to 30 s between tries


class PluginError(RuntimeError):
    """The plugin's code raised; the message is its stack."""


def plugin_install() -> Path:
    """The plugin's install (sources plus ``npm ci --omit=dev``), as ``make interop`` prepares it."""
    value = os.environ.get(INSTALL_ENV)
    if not value:
        raise RuntimeError(f"{INSTALL_ENV} is not set: run these tests with `make interop`")
    path = Path(value)
    if not (path / "dist" / "src" / "store.js").is_file() or not (path / "node_modules").is_dir():
        raise RuntimeError(f"{path} is not an installed memory-lancedb-pro (dist/ and node_modules/): run make interop")
    return path


@dataclass
class Held:
    """A lock held by the plugin: ``locked_at`` (ms since the epoch) and the answer that ends it."""

    locked_at: int
    done: Future[Any]


class PluginDriver:
    """One node process holding at most one ``MemoryStore`` (and one ``Embedder``)."""

    def __init__(self, install: Path, *, stderr_path: Path) -> None:
        self._stderr = stderr_path.open("wb")
        self._process = subprocess.Popen(
            ["node", str(DRIVER), str(install)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=install,
        )
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._answers: dict[int, Future[Any]] = {}
        self._events: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._reader = threading.Thread(target=self._read, name="plugin-driver-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None  # noqa: S101
        for raw in self._process.stdout:
            message = json.loads(raw)
            ident = message.get("id")
            if "event" in message:
                with self._lock:
                    events = self._events.get(ident)
                if events is not None:
                    events.put(message)
                continue
            with self._lock:
                future = self._answers.pop(ident, None)
            if future is None:
                continue
            if message["ok"]:
                future.set_result(message["result"])
            else:
                future.set_exception(PluginError(message["error"]))
        with self._lock:
            left, self._answers = self._answers, {}
        for future in left.values():
            future.set_exception(PluginError("the node driver exited"))

    def submit(self, op: str, *, events: queue.Queue[dict[str, Any]] | None = None, **args: Any
               ) -> tuple[int, Future[Any]]:
        """Send one command; its answer arrives in the future, its events (if any) in ``events``."""
        ident = next(self._ids)
        future: Future[Any] = Future()
        with self._lock:
            self._answers[ident] = future
            if events is not None:
                self._events[ident] = events
        future.add_done_callback(lambda _: self._forget_events(ident))
        assert self._process.stdin is not None  # noqa: S101
        line = json.dumps({"id": ident, "op": op, **args}) + "\n"
        with self._lock:
            self._process.stdin.write(line.encode())
            self._process.stdin.flush()
        return ident, future

    def _forget_events(self, ident: int) -> None:
        with self._lock:
            self._events.pop(ident, None)

    def call(self, op: str, **args: Any) -> Any:
        return self.submit(op, **args)[1].result(ANSWER_TIMEOUT_S)

    # --- the MemoryStore API ---
    def init(self, db_path: Path, vector_dim: int) -> None:
        self.call("init", dbPath=str(db_path), vectorDim=vector_dim)

    def store(self, text: str, vector: list[float], *, category: str = "fact", scope: str = "global",
              importance: float = 0.7) -> dict[str, Any]:
        entry = {"text": text, "vector": vector, "category": category, "scope": scope, "importance": importance}
        result: dict[str, Any] = self.call("store", entry=entry)
        return result

    def get(self, memory_id: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.call("getById", memoryId=memory_id)
        return result

    def vector_search(self, vector: list[float], limit: int = 5, *, exclude_inactive: bool = False
                      ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("vectorSearch", vector=vector, limit=limit,
                                                 excludeInactive=exclude_inactive)
        return result

    def retrieve(self, query: str, vector: list[float], limit: int = 5) -> list[dict[str, Any]]:
        """The plugin's own retriever (memory_recall's), with ``vector`` as the query's embedding."""
        result: list[dict[str, Any]] = self.call("retrieve", query=query, vector=vector, limit=limit)
        return result

    def upgrade_dry_run(self) -> dict[str, Any]:
        """``MemoryUpgrader``'s count and dry run: total, legacy, totalLegacy, skipped, byCategory."""
        result: dict[str, Any] = self.call("upgradeDryRun")
        return result

    def smart_metadata(self, memory_id: str) -> dict[str, Any]:
        """The row's metadata as the plugin reads it (its ``parseSmartMetadata``)."""
        result: dict[str, Any] = self.call("smartMetadata", memoryId=memory_id)
        return result

    def supersede(self, target_id: str, text: str, vector: list[float], *, category: str = "fact",
                  memory_category: str = "cases", scope: str = "global") -> dict[str, Any]:
        """The plugin's memory_store supersede: a new row replacing ``target_id``, committed with its invalidation."""
        entry = {"text": text, "vector": vector, "category": category, "scope": scope, "importance": 0.7}
        result: dict[str, Any] = self.call("supersede", targetId=target_id, entry=entry, memoryCategory=memory_category)
        return result

    def list(self, limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("list", limit=limit, offset=offset)
        return result

    def update(self, memory_id: str, **patch: Any) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.call("update", memoryId=memory_id, patch=patch)
        return result

    def delete(self, memory_id: str) -> bool:
        return bool(self.call("delete", memoryId=memory_id))

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self.call("stats")
        return result

    def count(self) -> int:
        return int(self.call("count"))

    def hold_lock(self, ms: int) -> Held:
        """Take the plugin's write lock and keep it ``ms`` milliseconds; returns once it is held."""
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        _, future = self.submit("holdLock", events=events, ms=ms)
        event = events.get(timeout=ANSWER_TIMEOUT_S)
        return Held(locked_at=int(event["at"]), done=future)

    def close(self) -> None:
        try:
            if self._process.poll() is None:
                with contextlib.suppress(PluginError):  # a store that never opened has nothing to close
                    self.call("close")
                assert self._process.stdin is not None  # noqa: S101
                self._process.stdin.close()
                self._process.wait(30)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait(30)
            self._reader.join(30)
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._stderr.close()
