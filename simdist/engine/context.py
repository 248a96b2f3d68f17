"""Which simulated rank the calling thread is running (set by the transport that runs ranks)."""
from __future__ import annotations

import threading

_tls = threading.local()


def current_rank():
    """The Rank of the calling thread, or None outside a simulated rank."""
    return getattr(_tls, "rank", None)


_live = {}  # thread ident -> the Rank that thread runs


def set_current_rank(rank):
    _tls.rank = rank
    if rank is None:
        _live.pop(threading.get_ident(), None)
    else:
        _live[threading.get_ident()] = rank


def forget_thread(ident):
    """A thread that no longer runs a rank although it never returned (a stalled rank left blocked)."""
    _live.pop(ident, None)


def process_rank():
    """For a host thread the program itself started (DataLoader's pin-memory thread): the one simulated rank this
    process runs, or None when it runs none or several (rank threads of one process)."""
    ranks = {id(r): r for r in list(_live.values())}
    return next(iter(ranks.values())) if len(ranks) == 1 else None


def live_ranks():
    return len({id(r) for r in list(_live.values())})


def note_thread_refusal(exc):
    """A named refusal (UnsupportedOperation) that ended a host thread the program started: every rank this process
    runs keeps the first, and its program ends with it (ranks/__init__.py _play), since what it computed afterwards
    relied on work the thread never did (threading's excepthook only prints it; torch.distributed.checkpoint's
    writer threads then died and dcp.save failed later with a raw KeyError)."""
    for r in {id(r): r for r in list(_live.values())}.values():
        if getattr(r, "thread_refusal", None) is None:
            r.thread_refusal = exc


def outside_rank(what, default_message):
    """The error for `what` done in a thread that runs no rank: while a run is live in this process, that is a
    host thread the program started (threading.Thread, a pool worker), whose device work simdist does not model
    (UnsupportedOperation: the order of work issued by two host threads would depend on OS scheduling, and a read
    of device memory there would see it unordered with the rank's pending kernels); else SimulationError."""
    from .errors import SimulationError, UnsupportedOperation
    if live_ranks():
        return UnsupportedOperation(
            f"{what} in a host thread the program started ({threading.current_thread().name}) is not modelled by "
            "simdist: torch.cuda calls and device work run only in a rank's own thread (hand the work back to it)")
    return SimulationError(default_message)
