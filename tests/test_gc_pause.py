"""Start-up objects leave the collector's sight while the server runs, and come back after."""

from __future__ import annotations

import gc

import pytest

from app.gc_pause import startup_objects_frozen
from app.main import create_app
from app.settings import Settings


def _tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_objects_alive_at_start_are_exempt_until_the_block_ends() -> None:
    before = [[]]  # a container: the collector tracks it
    assert _tracked(before)
    with startup_objects_frozen():
        assert gc.get_freeze_count() > 0 and not _tracked(before)
        later = [[]]
        assert _tracked(later)  # what is allocated afterwards is still collected
    assert gc.get_freeze_count() == 0 and _tracked(before)


@pytest.mark.anyio
@pytest.mark.parametrize("freeze", [True, False])
async def test_the_server_app_freezes_its_start_up_objects_only_when_asked(settings: Settings, freeze: bool) -> None:
    app = create_app(settings, freeze_startup_objects=freeze)
    async with app.router.lifespan_context(app):
        assert (gc.get_freeze_count() > 0) is freeze
    assert gc.get_freeze_count() == 0
