"""The model child: ``python -m app.memory.embeddings.model_worker '<spec JSON>'``.

Builds the embedder the spec names in process, loads its model, then answers requests until its
stdin closes. The protocol is in ``model_process``. It imports only the embedder's own module
(numpy and the model package), never the server's web or store stack.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
from typing import Any, BinaryIO

import numpy as np

from app.memory.embeddings.model_process import FRAME_HEADER, SHAPE


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group; the server shuts down and closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a model library that prints writes to stderr, not into the protocol
    source = sys.stdin.buffer
    try:
        embedder, model, load_seconds = _load(json.loads(argv[0]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        _send(out, b"E" + f"{type(exc).__name__}: {exc}".encode())
        return 1
    _send(out, b"R" + json.dumps({"load_seconds": load_seconds}).encode())
    while (message := _receive(source)) is not None:
        request = json.loads(message[1:])
        try:
            vectors = np.ascontiguousarray(embedder._encode(model, request["kind"], request["texts"]), dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - one failed batch must not end the child
            _send(out, b"E" + f"{embedder.name} ({embedder.model}) failed: {type(exc).__name__}: {exc}".encode())
            continue
        rows, columns = vectors.shape
        _send(out, b"V" + SHAPE.pack(rows, columns) + vectors.tobytes())
    return 0


def _load(spec: dict[str, Any]) -> tuple[Any, Any, float]:
    embedder = getattr(importlib.import_module(spec["module"]), spec["cls"])(**spec["kwargs"])
    started = time.perf_counter()
    model = embedder._load_model()
    return embedder, model, time.perf_counter() - started


def _send(out: BinaryIO, body: bytes) -> None:
    out.write(FRAME_HEADER.pack(len(body)) + body)
    out.flush()


def _receive(source: BinaryIO) -> bytes | None:
    header = source.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None  # the parent closed our stdin (or died)
    (length,) = FRAME_HEADER.unpack(header)
    body = source.read(length)
    return body if len(body) == length else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
