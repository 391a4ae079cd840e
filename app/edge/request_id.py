"""Request ids: keep a caller's sane ``X-Request-ID`` so logs line up across services, else mint one."""

from __future__ import annotations

import re
import uuid

_SANE_RE = re.compile(rb"^[A-Za-z0-9._\-]{1,64}$")
HEADER = b"x-request-id"


def pick_request_id(incoming: list[bytes]) -> str:
    """The first incoming id if it is short and plain (it ends up in logs), else a fresh uuid4 hex."""
    if incoming and _SANE_RE.match(incoming[0]):
        return incoming[0].decode("ascii")
    return uuid.uuid4().hex
