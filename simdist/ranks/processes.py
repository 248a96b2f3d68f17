"""The process transport: every simulated rank is an OS process of its own (own interpreter, own module
globals: Megatron's parallel_state, RNG trackers, buffers), as torchrun starts it.

Turns follow simdist/engine/turns.py exactly as in threads.py, so a run gives the same digest with either
transport: the rank holding the baton runs, then hands the baton on. Here the baton travels through a
torch.distributed Store (a TCPStore: torch's own rendezvous machinery), together with every message posted
and not yet delivered, as one pickled package under the key of the receiving rank's next turn. Only the holder
runs, so the package is the whole shared state of the run; waiting for a turn is a blocking Store.get, and a
finished, deadlocked or failed run is announced by sending every other rank an "over" package.
"""
from __future__ import annotations

import pickle

from ..engine.turns import Baton, end_turn
from . import RankHooks, TurnTaker

CHUNK = 4 << 20  # torch's libuv TCPStore refuses a value over 8 MiB (and drops the connection)


def put(store, key, value):
    """store.set of a value of any size: over CHUNK it goes in parts, and the key itself is written last (its
    readers block on it), so a reader never sees a partial value."""
    if len(value) <= CHUNK:
        store.set(key, b"v" + value)
        return
    parts = range(0, len(value), CHUNK)
    for i, at in enumerate(parts):
        store.set(f"{key}/part{i}", value[at:at + CHUNK])
    store.set(key, b"p" + str(len(parts)).encode())


def take(store, key, delete=False):
    """The value `put` wrote under key (blocks until it is there); with delete, the key and its parts go."""
    head = store.get(key)
    if head[:1] == b"v":
        value = head[1:]
        parts = 0
    else:
        parts = int(head[1:])
        value = b"".join(store.get(f"{key}/part{i}") for i in range(parts))
    if delete:
        store.delete_key(key)
        for i in range(parts):
            store.delete_key(f"{key}/part{i}")
    return value


class ProcessTransport(TurnTaker):
    """Runs the one rank of this process; `store` is shared by the run's processes, `prefix` names the run."""

    def __init__(self, world, rank, store, prefix, hooks=None):
        self.world = world
        self.me = world.ranks[rank]
        self.n = world.world_size
        self.store = store
        self.prefix = prefix
        self.hooks = hooks or RankHooks()
        self.baton = None
        self.mail = None  # every rank's undelivered messages, while this rank holds the baton
        self.sent = None  # how many packages each rank has been sent (the key of its next turn)
        self.received = 0
        self.over = None  # ("finished" | "deadlock" | "failed", rank that ended it) once the run is over
        self.wait_text = None  # what this rank was waiting for when the run ended (for a Deadlock's text)
        world.transport = self

    def run(self, fn):
        """Run fn(rank) on this process's rank, taking turns with the other processes until the run is over."""
        if self.me.rank == 0:
            self.baton, self.mail, self.sent = Baton(self.n), [[] for _ in range(self.n)], [0] * self.n
        elif not self._receive():
            return
        self._play(self.me, fn)

    def _fail(self, rank, error):
        self._announce("failed")

    # --- turns ----------------------------------------------------------------
    def _hand_over(self, rank, progressed):
        if self.over is not None:
            return False
        try:
            nxt = end_turn(rank, self.baton, progressed, self.mail)
        except BaseException as e:  # noqa: BLE001 - a failure while deciding ends the run with it
            if self.world.fatal is None:
                self.world.fatal = e
            rank.error = e
            self._announce("failed")
            return False
        if nxt is None:
            self._announce(self.baton.outcome)
            return False
        if nxt == rank.rank:
            return True
        self._send(nxt, {"baton": self.baton, "mail": self.mail, "sent": self.sent})
        self.baton = self.mail = None
        return self._receive()

    def _key(self, rank, k):
        return f"{self.prefix}turn/{rank}/{k}"

    def _send(self, rank, package):
        self.sent[rank] += 1
        put(self.store, self._key(rank, self.sent[rank]), pickle.dumps(package, protocol=pickle.HIGHEST_PROTOCOL))

    def _receive(self):
        """Block until this rank's next package; False when it says the run is over."""
        self.received += 1
        key = self._key(self.me.rank, self.received)
        package = pickle.loads(take(self.store, key, delete=True))
        if "over" in package:
            self.over = package["over"]
            self.wait_text = self.me.describe_wait()
            return False
        self.baton, self.mail, self.sent = package["baton"], package["mail"], package["sent"]
        return True

    def _announce(self, outcome):
        """The holder ends the run for everyone (only the holder runs, so only it can)."""
        if self.over is not None or self.sent is None:
            return
        self.over = (outcome, self.me.rank)
        self.wait_text = self.me.describe_wait()
        for r in range(self.n):
            if r != self.me.rank:
                self._send(r, {"over": self.over})
