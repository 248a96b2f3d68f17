"""Turns: how ranks take their turn to run, one at a time, whatever runs them (threads or processes).

A rank runs its program until its host must wait for something only another rank can provide; then the right
to run (the baton) passes to the next rank in rank order. At its turn a rank first reads the messages posted to
it, then runs the device work it may (Rank.service), then resumes its program if its wait is over. Every
decision is taken from what the baton carries and from the messages, never from wall-clock timing, so a run is a
pure function of (program, world size, seed, policy) and the same for every transport.

When a whole round of turns makes no progress, every rank is waiting: the earliest time any of them can resume
(the least known wait bound) is a floor under every event nobody knows of yet, and device work may proceed up to
it (the lookahead of conservative parallel simulation). If no rank has a known bound, they wait for each other:
a Deadlock. When every rank has finished and a round makes no progress, the run is over.
"""
from __future__ import annotations

from .rank import BLOCKED, DONE, NEW


class Baton:
    """What travels with the right to run."""

    def __init__(self, n):
        self.n = n
        self.holder = 0
        self.quiet = 0  # consecutive turns without progress
        self.floor = 0  # no event anybody does not know of yet happens before this virtual time
        self.states = [NEW] * n
        self.bounds = [None] * n  # the known resume time of each waiting rank
        self.launches = [0] * n
        self.outcome = None  # None while running, then "finished" or "deadlock"


def begin_turn(rank, baton, messages):
    """The start of `rank`'s turn: read its messages, run its device work. Returns whether anything happened."""
    rank.floor = baton.floor
    rank.world_launches = sum(baton.launches) - baton.launches[rank.rank]
    progressed = rank.deliver(messages)
    if rank.state != NEW:
        progressed = rank.service() or progressed
    return progressed


def can_resume(rank):
    """Whether a waiting rank's wait is over (after begin_turn)."""
    return rank.state == BLOCKED and rank.wait_cond() is not None


def end_turn(rank, baton, progressed):
    """The end of `rank`'s turn: record its state and pass the baton on. Returns the next holder, or None when
    the run is over (baton.outcome says how)."""
    r = rank.rank
    baton.states[r] = rank.state
    b = rank.wait_bound() if rank.state == BLOCKED and rank.wait_bound is not None else None
    baton.bounds[r] = b
    baton.launches[r] = rank.launches
    baton.quiet = 0 if progressed else baton.quiet + 1
    if baton.quiet >= baton.n:  # a whole round without progress
        if all(s == DONE for s in baton.states):
            baton.outcome = "finished"
            return None
        known = [b for s, b in zip(baton.states, baton.bounds) if s == BLOCKED and b is not None]
        if known and min(known) > baton.floor:
            baton.floor = min(known)
            baton.quiet = 0
        else:
            baton.outcome = "deadlock"
            return None
    baton.holder = (r + 1) % baton.n
    return baton.holder
