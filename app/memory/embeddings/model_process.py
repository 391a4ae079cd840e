"""Run an in-process model in a child process of its own, so it and the server never share a GIL.

Why: under many concurrent writers the USE model in the server spent much of its wall time waiting
for the GIL, which the event loop, the LanceDB threads and the model's own pure-Python tokenizer took
turns holding, and the embedder was the bottleneck (docs/performance.md, 'Model child process'). In
a child process the model keeps a core to itself and the server's threads no longer wait for the
tokenizer.

Protocol, over the child's stdin and stdout (the child moves its own fd 1 to stderr first, so a
stray print in a model library cannot corrupt it): every message is a 4-byte big-endian length,
then a body whose first byte says what it is.

- parent -> child: ``J`` + JSON ``{"kind": ..., "texts": [...]}``
- child -> parent: ``R`` + JSON ``{"load_seconds": ...}`` once the model is loaded, then per
  request ``V`` + rows and columns (two big-endian uint32) + float32 data, or ``E`` + a message.

Closing the child's stdin ends it, so a server that dies (even by SIGKILL) takes its child along.
A child that dies or stops answering is killed and started again by the next request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.memory.embeddings.base import EmbeddingError

logger = logging.getLogger(__name__)

WORKER_MODULE = "app.memory.embeddings.model_worker"
LOAD_TIMEOUT_S = 180.0  # a cold disk and a 120 MB model; normally about a second
EXIT_WAIT_S = 5.0
FRAME_HEADER = struct.Struct(">I")
SHAPE = struct.Struct(">II")


@dataclass(frozen=True)
class ModelSpec:
    """What the child builds: ``getattr(import_module(module), cls)(**kwargs)``, run in process."""

    module: str
    cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> str:
        return json.dumps({"module": self.module, "cls": self.cls, "kwargs": self.kwargs})


class ModelProcess:
    """The parent's handle on one model child; blocking, used from one thread at a time."""

    def __init__(self, spec: ModelSpec, *, reply_timeout_s: float) -> None:
        self.spec = spec
        self.reply_timeout_s = reply_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> float:
        """Start the child and wait until its model is loaded; returns the child's load seconds.

        Raises:
            EmbeddingError: the child could not start or load the model.
        """
        self._stop()
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
            [sys.executable, "-m", WORKER_MODULE, self.spec.as_json()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
        )
        assert self._process.stdin is not None  # noqa: S101
        os.set_blocking(self._process.stdin.fileno(), False)  # a hung child must not block a write forever
        self.starts += 1
        kind, body = self._exchange(None, LOAD_TIMEOUT_S, "load the model")
        if kind != b"R":
            self._stop()
            raise EmbeddingError(f"the model process could not load {self.spec.cls}: {body.decode(errors='replace')}")
        load_seconds = float(json.loads(body)["load_seconds"])
        logger.info("model process %d loaded %s in %.2fs", self.pid, self.spec.cls, load_seconds)
        return load_seconds

    def encode(self, kind: str, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in the child, starting it first if it is not running.

        Raises:
            EmbeddingError: the model failed, or the child died or stopped answering (it is
                started again on the next call).
        """
        if not self.running:
            if self._process is not None:
                logger.warning("model process %s had exited (code %s); starting a new one",
                               self.pid, self._process.returncode)
            self.start()
        request = b"J" + json.dumps({"kind": kind, "texts": texts}, ensure_ascii=False).encode()
        reply, body = self._exchange(request, self.reply_timeout_s, f"embed {len(texts)} texts")
        if reply == b"E":
            raise EmbeddingError(body.decode(errors="replace"))
        if reply != b"V":
            self._stop()
            raise EmbeddingError(f"the model process sent an unknown reply {reply!r}; it restarts on the next request")
        rows, columns = SHAPE.unpack_from(body)
        return np.frombuffer(body, dtype=np.float32, offset=SHAPE.size).reshape(rows, columns)

    def close(self) -> None:
        """End the child: close its stdin, wait, then kill it if it lingers."""
        self._stop()

    def _exchange(self, request: bytes | None, timeout_s: float, what: str) -> tuple[bytes, bytes]:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None  # noqa: S101
        deadline = time.monotonic() + timeout_s
        try:
            if request is not None:
                _write_frame(process.stdin.fileno(), request, deadline)
            message = _read_frame(process.stdout.fileno(), deadline)
        except TimeoutError:
            self._stop()
            raise EmbeddingError(f"the model process did not {what} within {timeout_s:g} s; "
                                 "it was stopped and restarts on the next request") from None
        except (OSError, EOFError) as exc:  # a broken pipe or end of output: the child died
            self._stop()  # waits for the exit: the output can close a moment before the code is there
            code = process.returncode
            raise EmbeddingError(f"the model process exited (code {code}) while asked to {what}; "
                                 "it restarts on the next request") from exc
        return message[:1], message[1:]

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None  # noqa: S101
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def _write_frame(fd: int, body: bytes, deadline: float) -> None:
    data = memoryview(FRAME_HEADER.pack(len(body)) + body)
    while data:
        _wait(fd, deadline, write=True)
        with contextlib.suppress(BlockingIOError):  # writable, yet the pipe filled up meanwhile
            data = data[os.write(fd, data):]


def _read_frame(fd: int, deadline: float) -> bytes:
    (length,) = FRAME_HEADER.unpack(_read_exact(fd, FRAME_HEADER.size, deadline))
    return _read_exact(fd, length, deadline)


def _read_exact(fd: int, size: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    missing = size
    while missing:
        _wait(fd, deadline, write=False)
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            raise EOFError("the model process closed its output")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _wait(fd: int, deadline: float, *, write: bool) -> None:
    """Block until ``fd`` is ready (select releases the GIL), or raise TimeoutError at ``deadline``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    ready = select.select([], [fd], [], remaining)[1] if write else select.select([fd], [], [], remaining)[0]
    if not ready:
        raise TimeoutError
