"""Capped capture of a child's output: keep the head and the tail, count every byte."""

from __future__ import annotations

import asyncio

CHUNK = 64 * 1024


class CappedBuffer:
    """At most ``cap`` bytes kept: the first quarter and the last three quarters of the stream."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:  # trim in batches, not on every chunk
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + min(len(self.tail), self.tail_cap)

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail_cap else b""
        if not self.truncated:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(tail)
        marker = f"\n[... {omitted} bytes omitted ...]\n"
        return bytes(self.head).decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")


async def drain(stream: asyncio.StreamReader | None, buffer: CappedBuffer) -> None:
    """Read until EOF, so the child never blocks on a full pipe whatever it writes."""
    if stream is None:
        return
    while chunk := await stream.read(CHUNK):
        buffer.feed(chunk)
