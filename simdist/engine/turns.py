"""Turns: how ranks take their turn to run, one at a time, whatever runs them (threads or processes).

A rank runs its program until its host must wait for something only another rank can provide; then the right
to run (the baton) passes to the next rank in rank order. At its turn a rank first reads the messages posted to
it, then runs the device work it may (Rank.service), then resumes its program if its wait is over. Every
decision is taken from what the baton carries and from the messages, never from wall-clock timing, so a run is a
pure function of (program, world size, seed, policy) and the same for every transport.

A turn whose rank would find nothing new is skipped: a rank whose last turn made no progress (no message, no
device work run, its wait not over), with no message posted to it since and the same floor, would do exactly
the same again, so it counts as a turn without progress without its transport switching to it (a thread switch,
or a store round trip between processes). The decisions are those of taking the turn: skipping changes no run.

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
        self.seen_floor = [None] * n  # the floor at each rank's last turn (None: it has not had one)
        self.idle = [False] * n  # whether each rank's last turn made no progress
        self.outcome = None  # None while running, then "finished" or "deadlock"


def begin_turn(rank, baton, messages):
    """The start of `rank`'s turn: read its messages, run its device work. Returns whether anything happened."""
    rank.floor = baton.floor
    baton.seen_floor[rank.rank] = baton.floor
    rank.world_launches = sum(baton.launches) - baton.launches[rank.rank]
    progressed = rank.deliver(messages)
    if rank.state != NEW:
        progressed = rank.service() or progressed
    return progressed


def can_resume(rank):
    """Whether a waiting rank's wait is over (after begin_turn)."""
    return rank.state == BLOCKED and rank.wait_cond() is not None


def end_turn(rank, baton, progressed, mail):
    """The end of `rank`'s turn: record its state and pass the baton on (`mail[r]`: the messages waiting for
    rank r). Returns the next holder, or None when the run is over (baton.outcome says how)."""
    r = rank.rank
    baton.states[r] = rank.state
    b = rank.wait_bound() if rank.state == BLOCKED and rank.wait_bound is not None else None
    baton.bounds[r] = b
    baton.launches[r] = rank.launches
    baton.idle[r] = not progressed
    while True:
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
        r = (r + 1) % baton.n
        baton.holder = r
        if not _nothing_new(baton, r, mail):
            return r
        progressed = False  # r's turn would read nothing and change nothing: taken as done


def _nothing_new(baton, r, mail):
    return baton.idle[r] and not mail[r] and baton.seen_floor[r] == baton.floor and baton.states[r] != NEW
