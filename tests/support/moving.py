"""What the moving log's tests check of its chunk heap (``integration/roles/``, the fail-point
files of ``integration/core/failpoints/`` that strike its sections)."""

from __future__ import annotations

from typing import Any


def assert_no_chunk_leaked(m: Any) -> int:
    """Reset the log ``m`` (a ``MovingLogs``): every chunk handed out must then be on the free
    list. The heap's top (chunks handed out), for what the test checks next."""
    m.reset()
    top, free, _, _ = m.chunks()
    assert free == top, f"{top - free} chunks leaked"
    return int(top)
