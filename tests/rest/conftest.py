"""A client of the memory REST routes on a live server."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.rest.support import API
from tests.support.server import LiveServer


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url + API, timeout=30) as http:
        yield http
