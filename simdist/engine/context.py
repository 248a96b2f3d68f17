"""Which simulated rank the calling thread is running (set by the transport that runs ranks)."""
from __future__ import annotations

import threading

_tls = threading.local()


def current_rank():
    """The Rank of the calling thread, or None outside a simulated rank."""
    return getattr(_tls, "rank", None)


def set_current_rank(rank):
    _tls.rank = rank
