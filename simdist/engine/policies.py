"""Delay policies: they decide how long each op takes, nothing else.

Every rank has its own copy of the policy (`for_rank`), as every process would: a rank's kernels are keyed by
(rank, stream name, per-stream sequence number) and their durations depend only on that rank's launches, so a
run does not depend on how ranks interleave. A collective's duration must be the same on every participant: it
is `collective(key, base, extras)` where `key` is (group name, sequence number) and `extras` are the
participants' `collective_extra(key)` draws, in rank order. The schedule of a run is the map op-key -> duration;
`Replay` plays one back. Pluggable in the spirit of shuttle's schedulers over one runtime.
"""
from __future__ import annotations

import copy
import math
import random


class Policy:
    name = "policy"

    def for_rank(self, rank):
        """This policy's copy for one rank (its per-run state lives there)."""
        p = copy.copy(self)
        p.bind(rank)
        return p

    def bind(self, rank):
        """Called once per rank per run before any op; keep per-run state here."""
        self.rank = rank

    def kernel(self, key, base_ns: int) -> int:
        return base_ns

    def collective_extra(self, key) -> int:
        """This rank's draw for a collective it launches (combined over participants by `collective`)."""
        return 0

    def collective(self, key, base_ns: int, extras) -> int:
        return base_ns + max(extras, default=0)

    def describe(self) -> str:
        return self.name


_COLLECTIVE_FACTORS = {}  # (policy, group, sequence number) -> a collective's factor: a pure function of those


class Jitter(Policy):
    """Seeded random durations: mostly near the cost model, sometimes much slower.

    Each op's duration is the cost model's times exp(U), U uniform with standard deviation `sigma`; the heavy
    tail (a straggler kernel or a slow link) is what exposes races: a 15% chance of a 5-50x slowdown per op.
    Kernels draw from their rank's generator in launch order; a collective's factor is a pure function of
    (seed, group, sequence number), so every participant computes the same.
    """

    name = "jitter"

    def __init__(self, seed: int = 0, sigma: float = 0.7, tail: float = 0.15, tail_range=(5.0, 50.0)):
        self.seed = seed
        self.sigma = sigma
        self.tail = tail
        self.tail_range = tail_range

    def bind(self, rank):
        super().bind(rank)
        self.random = random.Random(self.seed * 1_000_003 + rank.rank * 7919 + 17).random

    def _factor(self, r):
        f = math.exp(self.sigma * 3.4641016 * (r() - 0.5))  # log-factor uniform with standard deviation sigma
        draw_value = r()
        if draw_value < self.tail:
            lo, hi = self.tail_range
            f *= lo + (hi - lo) * (draw_value / self.tail)
        return f

    def kernel(self, key, base_ns):
        # _factor inlined: this runs once per simulated kernel (same draws, same values)
        r = self.random
        f = math.exp(self.sigma * 3.4641016 * (r() - 0.5))
        draw_value = r()
        if draw_value < self.tail:
            lo, hi = self.tail_range
            f *= lo + (hi - lo) * (draw_value / self.tail)
        d = int(base_ns * f)
        return d if d > 1 else 1

    def collective(self, key, base_ns, extras):
        memo = (type(self), self.seed, self.sigma, self.tail, self.tail_range, key[0], key[1])
        try:
            f = _COLLECTIVE_FACTORS.get(memo)
        except TypeError:  # (an unhashable tail_range)
            memo = f = None
        if f is None:
            # seeding a generator from a string hashes it (sha512): every participant of every collective did it
            r = random.Random(f"simdist-collective/{self.seed}/{key[0]}/{key[1]}").random
            f = self._factor(r)
            if memo is not None:
                if len(_COLLECTIVE_FACTORS) > 200_000:
                    _COLLECTIVE_FACTORS.clear()
                _COLLECTIVE_FACTORS[memo] = f
        return max(1, int(base_ns * f))

    def describe(self):
        return f"jitter(seed={self.seed})"


class NoJitter(Policy):
    """Durations straight from the cost model (the 'fast GPU, no stragglers' world)."""

    name = "none"


class PCT(Policy):
    """Probabilistic Concurrency Testing over streams (Burckhardt et al., ASPLOS 2010).

    Each stream gets a random priority; ops on lower-priority streams are slowed so higher-priority streams run
    ahead; at d-1 random change points the running stream drops to the lowest priority. A bug of depth d among
    n streams and k ops is hit with probability >= 1/(n * k^(d-1)). Each rank draws its own priorities and
    change points (seeded by the rank); a collective is slowed by its slowest participant's draw.
    """

    name = "pct"

    def __init__(self, seed: int = 0, depth: int = 2, expected_ops: int = 200, slow_ns: int = 200_000):
        self.seed = seed
        self.depth = depth
        self.expected_ops = expected_ops
        self.slow_ns = slow_ns
        self.stats = {}  # rank -> (streams, ops) of the last run, for bound()

    def bind(self, rank):
        super().bind(rank)
        self.rng = random.Random(self.seed * 31 + 7 + rank.rank * 1_000_003)
        self.prio = {}
        self.count = 0
        self.changes = sorted(self.rng.randrange(1, max(2, self.expected_ops)) for _ in range(self.depth - 1))
        self.low = 0
        self.stats[rank.rank] = (0, 0)

    def _delay(self, stream_name):
        self.count += 1
        p = self.prio.get(stream_name)
        if p is None:
            p = self.prio[stream_name] = self.rng.random() + 1.0
        if self.changes and self.count >= self.changes[0]:
            self.changes.pop(0)
            self.low -= 1
            self.prio[stream_name] = self.low  # the stream running at the change point drops to the bottom
            p = self.low
        self.stats[self.rank.rank] = (len(self.prio), self.count)
        return sorted(self.prio.values(), reverse=True).index(p) * self.slow_ns

    def kernel(self, key, base_ns):
        return base_ns + self._delay(key[1])

    def collective_extra(self, key):
        return self._delay(f"collective:{key[0]}")

    def bound(self):
        n = max(1, sum(s for s, _ in self.stats.values()))
        k = max(1, sum(c for _, c in self.stats.values()))
        return 1.0 / (n * k ** (self.depth - 1))

    def describe(self):
        return f"pct(seed={self.seed}, depth={self.depth}); hit bound >= 1/(n*k^(d-1))"


class Choice(Policy):
    """Delays read from a sequence (or a callable), so Hypothesis can draw and shrink them.

    The i-th op a rank launches (kernels and collectives, in its launch order) gets `choices[i * world_size +
    rank] * unit_ns` extra: the ranks' ops interleave in the sequence, so each can be delayed on its own. Ops
    past the end of the sequence get none. A collective takes its slowest participant's draw.
    """

    name = "choice"

    def __init__(self, choices, unit_ns: int = 50_000):
        self.choices = choices
        self.unit_ns = unit_ns

    def bind(self, rank):
        super().bind(rank)
        self.i = 0
        self.stride = rank.world.world_size
        self.offset = rank.rank

    def _extra(self):
        i = self.i * self.stride + self.offset
        self.i += 1
        c = self.choices
        if callable(c):
            v = c(i)
        else:
            v = c[i] if i < len(c) else 0
        return int(v or 0) * self.unit_ns

    def kernel(self, key, base_ns):
        return base_ns + self._extra()

    def collective_extra(self, key):
        return self._extra()

    def describe(self):
        c = self.choices
        return f"choice({list(c) if not callable(c) else c!r})"


class Replay(Policy):
    """Plays back a recorded schedule (RunResult.schedule): same schedule, same digest."""

    name = "replay"

    def __init__(self, schedule: dict, fallback: Policy | None = None):
        self.schedule = dict(schedule)
        self.fallback = fallback or NoJitter()

    def bind(self, rank):
        super().bind(rank)
        self.fallback = self.fallback.for_rank(rank)

    def kernel(self, key, base_ns):
        d = self.schedule.get(key)
        return d if d is not None else self.fallback.kernel(key, base_ns)

    def collective_extra(self, key):
        return self.fallback.collective_extra(key)

    def collective(self, key, base_ns, extras):
        d = self.schedule.get(key)
        return d if d is not None else self.fallback.collective(key, base_ns, extras)


class Targeted(Policy):
    """A base policy plus large delays on chosen ops, to turn a possible hazard into an observed one."""

    name = "targeted"

    def __init__(self, delays: dict, base: Policy | None = None):
        self.delays = dict(delays)
        self.base = base or NoJitter()

    def bind(self, rank):
        super().bind(rank)
        self.base = self.base.for_rank(rank)

    def kernel(self, key, base_ns):
        return self.base.kernel(key, base_ns) + self.delays.get(key, 0)

    def collective_extra(self, key):
        return self.base.collective_extra(key)

    def collective(self, key, base_ns, extras):
        return self.base.collective(key, base_ns, extras) + self.delays.get(key, 0)

    def describe(self):
        return f"targeted({len(self.delays)} delayed ops)"


def make_policy(policy, seed):
    if policy is None:
        return Jitter(seed)
    if isinstance(policy, str):
        makers = {"jitter": lambda: Jitter(seed), "none": NoJitter, "pct": lambda: PCT(seed)}
        if policy not in makers:
            raise ValueError(f"unknown policy {policy!r}: expected one of {sorted(makers)}")
        return makers[policy]()
    if isinstance(policy, (list, tuple)):
        return Choice(policy)
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be None, a name, a list of delays or a simdist.Policy, got {policy!r}")
    return policy
