"""Who the server can tell things later: connections with a standing channel, and the 2026-07-28 listen bus.

See ``live`` for what is sent; this module only knows the SDK's connections and what each one asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ServerEvent
from mcp_types import LoggingLevel
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

LEVELS: tuple[LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
MAX_SUBSCRIPTIONS = 256  # per connection


def connection_of(session: ServerSession) -> Connection | None:
    """The connection behind a request's session proxy.

    SDK 2.3 hands lowlevel handlers and middleware the per-request ``ServerSession``, which keeps its
    ``Connection`` (the standing channel, the exit stack that runs when the client goes) private; the
    newer ``Context`` exposes it publicly. The subscription tests (tests/mcp/test_live_notifications.py) fail
    if an SDK release moves it.
    """
    connection = getattr(session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


def standing_channel(connection: Connection | None) -> bool:
    """Whether the server can reach this client later, outside any request of its own."""
    return (connection is not None and connection.has_standalone_channel
            and connection.protocol_version not in MODERN_PROTOCOL_VERSIONS)


@dataclass
class Listener:
    """A handshake-era connection that can be told things: its session, subscriptions and log level."""

    session: ServerSession
    uris: set[str] = field(default_factory=set)
    level: int | None = None  # no log messages until the client sets a level
    lists: bool = False  # it listed the resources, so it wants to know when the list changes

    @property
    def interested(self) -> bool:
        return self.lists or bool(self.uris) or self.level is not None


class ListenBus(InMemorySubscriptionBus):
    """The SDK's in-process bus for 2026-07-28 listen streams, counting them (the watcher sleeps without any)."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listening += 1
        done = False

        def once() -> None:
            nonlocal done
            if not done:
                done = True
                self.listening -= 1
                unsubscribe()

        return once


def listen_uris(params: Any) -> list[str]:
    notifications = params.get("notifications") if isinstance(params, Mapping) else None
    uris = notifications.get("resourceSubscriptions") if isinstance(notifications, Mapping) else None
    return [uri for uri in uris if isinstance(uri, str)][:MAX_SUBSCRIPTIONS] if isinstance(uris, list) else []


def honest_capabilities(result: dict[str, Any], reachable: bool) -> None:
    """Advertise list changes and subscriptions only to a client the server can reach later."""
    capabilities = result.get("capabilities")
    if isinstance(capabilities, dict) and isinstance(capabilities.get("resources"), dict):
        capabilities["resources"]["subscribe"] = reachable
        capabilities["resources"]["listChanged"] = reachable
