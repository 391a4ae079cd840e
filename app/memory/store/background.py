"""Threads that work off the request path yield the CPU to those on it.

Why: on a 2-core machine, checksumming a restored index (2.5 GB at a million rows) or writing it whole took
a core for seconds while the first recalls after a start waited for one (docs/performance.md, 'Start-up
from the saved index').
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger(__name__)

#: The niceness added to a background thread (Linux schedules threads by their own niceness).
BACKGROUND_NICENESS = 10


def yield_cpu_for_this_thread() -> None:
    """Lower the calling thread's scheduling priority for the rest of its life (it cannot be raised back
    without privileges: call it only in a thread of its own, never in one that serves requests)."""
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + BACKGROUND_NICENESS))
    except (AttributeError, OSError):  # not Linux, or not allowed: it runs at the normal priority
        logger.debug("cannot lower a background thread's priority", exc_info=True)
