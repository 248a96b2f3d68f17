"""How simulated ranks run. A transport runs one function per rank of a World and implements `wait(rank)`:
the rank has set what it waits for (Rank.block) and must not return before the transport resumes it.

- threads.py: every rank a host thread of this process, one running at a time, switched only where a rank
  waits, so a run does not depend on OS thread timing.

A transport is given `hooks` for what a process has once and rank threads of one process share (the torch
face's per-rank dispatch mode, the CPU random generator): enter / leave around a rank's function, suspend /
resume around each switch.
"""


class RankHooks:
    """Per-rank process state a transport swaps in and out; the default does nothing."""

    def enter(self, rank):
        pass

    def leave(self, rank):
        pass

    def suspend(self, rank):
        pass

    def resume(self, rank):
        pass
