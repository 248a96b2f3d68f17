"""How simulated ranks run. A transport runs one function per rank of a World and implements `wait(rank)`:
the rank has set what it waits for (Rank.block) and must not return before the transport resumes it.

- threads.py: every rank a host thread of this process, one running at a time, switched only where a rank
  waits, so a run does not depend on OS thread timing.
- processes.py: every rank an OS process of its own; the baton and the messages travel through a
  torch.distributed Store.
Both take turns as simdist/engine/turns.py decides (TurnTaker below holds what they share), so both give the same
digest.

A transport is given `hooks` for what a process has once and rank threads of one process share (the torch
face's per-rank dispatch mode, the CPU random generator): enter / leave around a rank's function, suspend /
resume around each switch.
"""
from ..engine.context import set_current_rank
from ..engine.errors import _Abort
from ..engine.hazards import hazards_before_error_note
from ..engine.rank import DONE, RUNNING
from ..engine.turns import begin_turn, can_resume


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


class TurnTaker:
    """What every transport does the same way: play a rank's program between turns, and park a waiting rank
    until its wait is over. A subclass keeps `mail` (messages per rank) and `baton` while it may run, and
    implements `_hand_over(rank, progressed)` (end the turn, pass the baton, return once the rank holds it again:
    True, or False when the run is over) and `_fail(rank, error)`."""

    def post(self, dst, msg):
        self.mail[dst].append(msg)

    def wait(self, me):
        """The running rank waits: take turns (this rank's and, through the baton, the others') until its own
        wait is over."""
        self.hooks.suspend(me)
        progressed = True  # it ran its program since its last turn
        while True:
            if not self._hand_over(me, progressed):
                raise _Abort()
            progressed = self._turn(me)
            if can_resume(me):
                break
        self.hooks.resume(me)
        me.state = RUNNING

    def _turn(self, rank):
        m, self.mail[rank.rank] = self.mail[rank.rank], []
        return begin_turn(rank, self.baton, m)

    def _play(self, rank, fn):
        """The rank's first turn, its program, then turns serving its device work until the run is over (a
        finished rank's collectives and queued kernels may still be pending)."""
        set_current_rank(rank)
        try:
            rank.state = RUNNING
            self._turn(rank)
            self.hooks.enter(rank)
            try:
                rank.returned = fn(rank.rank)
            finally:
                self.hooks.leave(rank)
            refusal = getattr(rank, "thread_refusal", None)
            if refusal is not None:  # the program ran on after one of its threads died of an unmodelled operation
                raise refusal
            rank.state = DONE
            progressed = True
            while self._hand_over(rank, progressed):
                progressed = self._turn(rank)
        except _Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised by the runner naming the rank
            refusal = getattr(rank, "thread_refusal", None)
            if refusal is not None and e is not refusal and not isinstance(e, _Abort):
                # a host thread of the program died of an unmodelled operation first: that is the run's error (what
                # the program raised afterwards, a KeyError of a missing result, follows from it)
                refusal.add_note(f"(simulated rank {rank.rank}'s program raised {type(e).__name__}: {e} afterwards)")
                e = refusal
            rank.error = e
            note = hazards_before_error_note(rank.rank, list(getattr(rank.detector, "order", ())))
            if note and hasattr(e, "add_note") and not isinstance(e, _Abort):
                e.add_note(note)
            if rank.world.fatal is None:
                rank.world.fatal = e
            self._fail(rank, e)
        finally:
            rank.state = DONE
            set_current_rank(None)
