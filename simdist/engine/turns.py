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
Where every rank lives in one process (threads), a turn that can only read the floor (no message, no device work
due, its wait not over) is taken on the baton holder's thread instead (quiet_turn): the same turn, no switch.

When a whole round of turns makes no progress, every rank is waiting: the earliest time any of them can resume
(the least known wait bound) is a floor under every event nobody knows of yet, and device work may proceed up to
it (the lookahead of conservative parallel simulation). If no rank has a known bound, they wait for each other:
a Deadlock. When every rank has finished and a round makes no progress, the run is over.
"""
from __future__ import annotations

from .rank import BLOCKED, DONE, NEW
from .scheduler import INF


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
        self.total_launches = 0  # sum(launches), kept as they change
        self.seen_floor = [None] * n  # the floor at each rank's last turn (None: it has not had one)
        self.idle = [False] * n  # whether each rank's last turn made no progress
        self.outcome = None  # None while running, then "finished" or "deadlock"


def begin_turn(rank, baton, messages):
    """The start of `rank`'s turn: read its messages, run its device work. Returns whether anything happened."""
    rank.floor = baton.floor
    baton.seen_floor[rank.rank] = baton.floor
    rank.world_launches = baton.total_launches - baton.launches[rank.rank]
    progressed = rank.deliver(messages)
    if rank.state != NEW:
        progressed = rank.service() or progressed
    return progressed


def can_resume(rank):
    """Whether a waiting rank's wait is over (after begin_turn)."""
    return rank.state == BLOCKED and rank.wait_cond() is not None


def end_turn(rank, baton, progressed, mail, ranks=None):
    """The end of `rank`'s turn: record its state and pass the baton on (`mail[r]`: the messages waiting for
    rank r). Returns the next holder, or None when the run is over (baton.outcome says how).

    `ranks`: every rank (a transport whose ranks share this process: threads). A rank's turn that can only read
    its floor (no message, no device work due, its wait not over) is then taken here, on the caller's thread,
    instead of switching to the rank's own (quiet_turn): the same turn, without a thread switch."""
    r = rank.rank
    _record(rank, baton, progressed)
    me = r
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
            if ranks is None or r == me or mail[r] or baton.states[r] == NEW or not quiet_turn(ranks[r], baton):
                return r
        progressed = False  # r's turn would read nothing and change nothing (or was taken here): taken as done


def _record(rank, baton, progressed):
    r = rank.rank
    baton.states[r] = rank.state
    b = rank.wait_bound() if rank.state == BLOCKED and rank.wait_bound is not None else None
    baton.bounds[r] = b
    n = rank.launches
    baton.total_launches += n - baton.launches[r]
    baton.launches[r] = n
    baton.idle[r] = not progressed


def quiet_turn(rank, baton):
    """Take `rank`'s turn on this thread if it can run nothing: no message waits for it (the caller checks) and
    no device work is due up to where Rank.service would drain (its host clock or the floor, its known resume
    time, everything once done), so the turn only reads the floor; then, unless its wait is over, record the
    turn as one without progress and return True. Otherwise return False, and the rank takes its turn on its own
    thread (device work runs there: thread-local torch state is the rank's). A rank whose wait is over is
    switched to as before; the turn it takes there is this one again (the same floor, still nothing to run)."""
    if rank.state == DONE:
        target = INF
    else:
        target = rank.host.clock
        if baton.floor > target:
            target = baton.floor
        if rank.state == BLOCKED and rank.wait_bound is not None:
            b = rank.wait_bound()
            if b is not None and b > target:
                target = b
    h = rank.queue.heap
    if h and h[0][0] <= target:
        return False
    if begin_turn(rank, baton, ()):
        from .errors import SimulationError
        raise SimulationError(f"internal: rank {rank.rank}'s quiet turn ran device work (Rank.service drains "
                              "further than turns.quiet_turn assumed)")
    if can_resume(rank):
        return False
    _record(rank, baton, False)
    return True


def _nothing_new(baton, r, mail):
    return baton.idle[r] and not mail[r] and baton.seen_floor[r] == baton.floor and baton.states[r] != NEW
