"""RunResult: what a run produced, assembled from every rank's RankOutcome (simdist/engine/outcome.py),
wherever the ranks ran (threads of this process or processes of their own)."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field

import torch

from .engine.errors import HazardError
from .engine.outcome import merge_hazards
from .engine.policies import Choice, Jitter
from .trace import TraceSource, chrome_trace


@dataclass
class RunResult:
    """What one simulated run produced."""

    returns: list
    hazards: list
    _digest: object = field(repr=False)
    _trace_source: tuple = field(repr=False)
    schedule: dict = field(repr=False)
    seed: int = 0
    world_size: int = 1
    policy: str = ""
    nccl: str = ""
    end_time_ns: int = 0
    ops: int = 0
    replay: str = ""

    @property
    def digest(self) -> str:
        """Hash of the schedule (every op's stream, sequence, start and end), the returns and the hazards."""
        d = self._digest
        if not isinstance(d, str):
            d = self._digest = d.hexdigest()
        return d

    @property
    def trace(self):
        """The Perfetto / Chrome trace as a dict (built on first use: most runs never need it)."""
        t = self.__dict__.get("_trace")
        if t is None:
            t = self.__dict__["_trace"] = chrome_trace(*self._trace_source)
        return t

    def save_trace(self, path):
        """Write a Perfetto / chrome://tracing JSON: a rank is a process, a stream a thread."""
        with open(path, "w") as f:
            json.dump(self.trace, f)
        return path

    def report(self) -> str:
        head = (f"simdist run: world_size={self.world_size} seed={self.seed} policy={self.policy} "
                f"nccl={self.nccl} ops={self.ops} virtual_time={self.end_time_ns / 1e6:.3f} ms "
                f"digest={self.digest}")
        if not self.hazards:
            return head + "\nno hazards"
        obs = sum(h.observed for h in self.hazards)
        body = "\n\n".join(str(h) for h in self.hazards)
        return f"{head}\n{len(self.hazards)} hazard(s), {obs} observed\n\n{body}\n\nreplay: {self.replay}"

    def raise_for_hazards(self):
        if self.hazards:
            raise HazardError(self.hazards)
        return self

    @property
    def observed(self):
        return [h for h in self.hazards if h.observed]


def _hash_value(h, x):
    if isinstance(x, torch.Tensor):
        t = x.detach()
        h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
        # row-major bytes: a fresh 1-D copy (a 0-dim tensor cannot be viewed as bytes, nor can a one-element
        # tensor whose stride is not 1, which .contiguous() leaves as it is)
        t = t.reshape(-1).clone(memory_format=torch.contiguous_format)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, (list, tuple)):
        h.update(b"[")
        for v in x:
            _hash_value(h, v)
        h.update(b"]")
    elif isinstance(x, dict):
        h.update(b"{")
        for k in sorted(x, key=repr):
            h.update(repr(k).encode())
            _hash_value(h, x[k])
        h.update(b"}")
    else:
        h.update(repr(x).encode())


def _target_of(fn):
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    if mod is None or mod.startswith("__"):
        main = sys.modules.get(mod or "__main__")
        path = getattr(main, "__file__", None)
        return f"{path}:{name}" if path else f"<interactive>:{name}"
    return f"{mod}:{name}"


def replay_command(fn, world_size, seed, pol, nccl, kwargs=None, args=()):
    script = getattr(fn, "_simdist_script", None)
    spawned = getattr(fn, "_simdist_spawn", None)
    target = shlex.quote(script[0]) if script else shlex.quote(_target_of(spawned or fn))
    cmd = f"simdist run {target} --world-size {world_size} --seed {seed} --nccl {nccl}"
    if spawned is not None:
        cmd += " --spawn"
    for flag, value in (("--args", list(args)), ("--kwargs", kwargs)):
        if value:
            try:
                cmd += f" {flag} {shlex.quote(json.dumps(value))}"
            except TypeError:
                cmd += f" (with non-JSON {flag[2:]})"
    if isinstance(pol, Choice) and not callable(pol.choices):
        cmd += f" --delays {','.join(str(int(c)) for c in pol.choices) or '0'}"
    elif not isinstance(pol, Jitter):
        cmd += f" --policy {shlex.quote(pol.name)}"
    if script and script[1]:
        cmd += " -- " + " ".join(shlex.quote(a) for a in script[1])  # last: everything after `--` is the script's
    return cmd


class _DigestSource:
    """Computes RunResult.digest on first use: most runs (the hunt's thousands) never read it."""

    def __init__(self, outcomes, returns, hazards):
        self.outcomes, self.hazards = outcomes, hazards
        r = hashlib.blake2b(digest_size=16)
        _hash_value(r, returns)  # now: the caller may change the returned objects before reading the digest
        self.returns_hash = r.digest()

    def hexdigest(self):
        h = hashlib.blake2b(digest_size=16)
        for o in self.outcomes:  # every rank's (stream, seq, start, end) of every op, in its execution order
            h.update(o.rank.to_bytes(4, "little"))
            h.update(o.ops.tobytes())
        h.update(self.returns_hash)
        for hz in self.hazards:  # sites by file name and line: the digest must not depend on where the code lives
            h.update(f"{hz.kind}|{_portable(hz.first.site)}|{_portable(hz.second.site)}|{hz.observed}".encode())
        return h.hexdigest()


def _portable(site):
    path, line = site
    return f"{os.path.basename(path)}:{line}"


def build_result(fn, outcomes, world_size, seed, pol, nccl, kwargs, args):
    hazards = merge_hazards(outcomes)
    returns = [o.returned for o in outcomes]
    schedule = {}
    for o in outcomes:
        schedule.update(o.schedule)
    replay = replay_command(fn, world_size, seed, pol, nccl, kwargs, args)
    return RunResult(returns=returns, hazards=hazards, _digest=_DigestSource(outcomes, returns, hazards),
                     _trace_source=(TraceSource(outcomes, world_size), hazards), schedule=schedule, seed=seed,
                     world_size=world_size, policy=pol.describe(), nccl=nccl,
                     end_time_ns=max((o.end_time for o in outcomes), default=0),
                     ops=sum(len(o.ops) // 4 for o in outcomes), replay=replay)
