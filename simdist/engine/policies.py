"""Delay policies: they decide how long each op takes, nothing else.

A policy sees each op once, in a deterministic order (the launch order of the
cooperatively scheduled ranks), and returns its duration in virtual ns. The
schedule of a run is the map op-key -> duration; `Replay` plays one back.
Pluggable in the spirit of shuttle's schedulers over one runtime.
"""
from __future__ import annotations

import math
import random


class Policy:
    name = "policy"

    def bind(self, world):
        """Called once per run before any op; keep per-run state here."""
        self.world = world

    def kernel(self, key, base_ns: int) -> int:
        return base_ns

    def collective(self, key, base_ns: int) -> int:
        return base_ns

    def describe(self) -> str:
        return self.name

    def replay_args(self) -> str:
        return ""


class Jitter(Policy):
    """Seeded random durations: mostly near the cost model, sometimes much slower.

    Each op's duration is the cost model's times exp(U), U uniform with standard deviation `sigma`; the heavy
    tail (a straggler kernel or a slow link) is what exposes races: a 15% chance of a 5-50x slowdown per op.
    """

    name = "jitter"

    def __init__(self, seed: int = 0, sigma: float = 0.7, tail: float = 0.15, tail_range=(5.0, 50.0)):
        self.seed = seed
        self.sigma = sigma
        self.tail = tail
        self.tail_range = tail_range

    def bind(self, world):
        super().bind(world)
        self.rngs = {}
        self.randoms = {}  # rank -> bound random() of its stream

    def _rng(self, rank):
        r = self.rngs.get(rank)
        if r is None:
            r = self.rngs[rank] = random.Random(self.seed * 1_000_003 + rank * 7919 + 17)
        return r

    def _factor(self, rng):
        r = rng.random
        # log-factor uniform with standard deviation sigma (two draws per op: this is on the per-op hot path)
        f = math.exp(self.sigma * 3.4641016 * (r() - 0.5))
        u = r()
        if u < self.tail:
            lo, hi = self.tail_range
            f *= lo + (hi - lo) * (u / self.tail)
        return f

    def kernel(self, key, base_ns):
        # _factor inlined: this runs once per simulated kernel (same draws, same values)
        r = self.randoms.get(key[0])
        if r is None:
            r = self.randoms[key[0]] = self._rng(key[0]).random
        f = math.exp(self.sigma * 3.4641016 * (r() - 0.5))
        u = r()
        if u < self.tail:
            lo, hi = self.tail_range
            f *= lo + (hi - lo) * (u / self.tail)
        d = int(base_ns * f)
        return d if d > 1 else 1

    def collective(self, key, base_ns):
        return max(1, int(base_ns * self._factor(self._rng(-1))))

    def describe(self):
        return f"jitter(seed={self.seed})"


class NoJitter(Policy):
    """Durations straight from the cost model (the 'fast GPU, no stragglers' world)."""

    name = "none"


class PCT(Policy):
    """Probabilistic Concurrency Testing over streams (Burckhardt et al., ASPLOS 2010).

    Each stream gets a random priority; ops on lower-priority streams are
    slowed so higher-priority streams run ahead; at d-1 random change points
    the running stream drops to the lowest priority. A bug of depth d among n
    streams and k ops is hit with probability >= 1/(n * k^(d-1)).
    """

    name = "pct"

    def __init__(self, seed: int = 0, depth: int = 2, expected_ops: int = 200, slow_ns: int = 200_000):
        self.seed = seed
        self.depth = depth
        self.expected_ops = expected_ops
        self.slow_ns = slow_ns

    def bind(self, world):
        super().bind(world)
        self.rng = random.Random(self.seed * 31 + 7)
        self.prio = {}
        self.count = 0
        self.changes = sorted(self.rng.randrange(1, max(2, self.expected_ops)) for _ in range(self.depth - 1))
        self.low = 0

    def _delay(self, stream_name, base):
        self.count += 1
        p = self.prio.get(stream_name)
        if p is None:
            p = self.prio[stream_name] = self.rng.random() + 1.0
        if self.changes and self.count >= self.changes[0]:
            self.changes.pop(0)
            self.low -= 1
            self.prio[stream_name] = self.low  # the stream running at the change point drops to the bottom
            p = self.low
        rank = sorted(self.prio.values(), reverse=True).index(p)
        return base + rank * self.slow_ns

    def kernel(self, key, base_ns):
        return self._delay(key[1], base_ns)

    def collective(self, key, base_ns):
        return self._delay(str(key[0]), base_ns)

    def bound(self):
        n = max(1, len(self.prio))
        k = max(1, self.count)
        return 1.0 / (n * k ** (self.depth - 1))

    def describe(self):
        return f"pct(seed={self.seed}, depth={self.depth}); hit bound >= 1/(n*k^(d-1))"


class Choice(Policy):
    """Delays read from a sequence (or a callable), so Hypothesis can draw and shrink them.

    The i-th op (kernels and collectives, in launch order) gets
    `choices[i] * unit_ns` extra; ops past the end of the sequence get none.
    """

    name = "choice"

    def __init__(self, choices, unit_ns: int = 50_000):
        self.choices = choices
        self.unit_ns = unit_ns

    def bind(self, world):
        super().bind(world)
        self.i = 0

    def _extra(self):
        i = self.i
        self.i += 1
        c = self.choices
        if callable(c):
            v = c(i)
        else:
            v = c[i] if i < len(c) else 0
        return int(v or 0) * self.unit_ns

    def kernel(self, key, base_ns):
        return base_ns + self._extra()

    def collective(self, key, base_ns):
        return base_ns + self._extra()

    def describe(self):
        c = self.choices
        return f"choice({list(c) if not callable(c) else c!r})"


class Replay(Policy):
    """Plays back a recorded schedule (RunResult.schedule): same schedule, same digest."""

    name = "replay"

    def __init__(self, schedule: dict, fallback: Policy | None = None):
        self.schedule = dict(schedule)
        self.fallback = fallback or NoJitter()

    def bind(self, world):
        super().bind(world)
        self.fallback.bind(world)

    def kernel(self, key, base_ns):
        d = self.schedule.get(key)
        return d if d is not None else self.fallback.kernel(key, base_ns)

    def collective(self, key, base_ns):
        d = self.schedule.get(key)
        return d if d is not None else self.fallback.collective(key, base_ns)


class Targeted(Policy):
    """A base policy plus large delays on chosen ops, to turn a possible hazard into an observed one."""

    name = "targeted"

    def __init__(self, delays: dict, base: Policy | None = None):
        self.delays = dict(delays)
        self.base = base or NoJitter()

    def bind(self, world):
        super().bind(world)
        self.base.bind(world)

    def kernel(self, key, base_ns):
        return self.base.kernel(key, base_ns) + self.delays.get(key, 0)

    def collective(self, key, base_ns):
        return self.base.collective(key, base_ns) + self.delays.get(key, 0)

    def describe(self):
        return f"targeted({len(self.delays)} delayed ops)"


def make_policy(policy, seed):
    if policy is None:
        return Jitter(seed)
    if isinstance(policy, str):
        return {"jitter": lambda: Jitter(seed), "none": NoJitter, "pct": lambda: PCT(seed)}[policy]()
    if isinstance(policy, (list, tuple)):
        return Choice(policy)
    return policy
