"""What ranks tell each other. Ranks share no state: a collective or a host rendezvous meets only through these
messages, delivered by the transport (simdist/ranks/) at the receiver's next turn, in the order they were
posted. Every field is plain data (numbers, strings, tuples, dicts, CPU tensors), so a message can cross a
process boundary.
"""
from __future__ import annotations


class Launched:
    """A rank launched its side of device collective `token` (group key, sequence number)."""

    __slots__ = ("token", "rank", "ranks", "group_name", "kind", "desc", "sig", "frames", "clock", "nbytes",
                 "extra", "meta")

    def __init__(self, token, rank, ranks, group_name, kind, desc, sig, frames, clock, nbytes, extra, meta):
        self.token = token
        self.rank = rank
        self.ranks = ranks  # the group's global ranks
        self.group_name = group_name
        self.kind = kind
        self.desc = desc  # e.g. "all_reduce(float32[4], SUM)"
        self.sig = sig  # what every rank's call must agree on
        self.frames = frames  # the call site: ((file, line, function), ...)
        self.clock = clock  # the side's full clock at launch (tokens the sender knows expanded)
        self.nbytes = nbytes
        self.extra = extra  # the sender's policy draw for this collective (Policy.collective_extra)
        self.meta = meta  # per-rank arguments the computation needs (all_to_all split sizes)


class Started:
    """A rank's side of `token` started at virtual time `start` (its stream reached it)."""

    __slots__ = ("token", "rank", "start")

    def __init__(self, token, rank, start):
        self.token = token
        self.rank = rank
        self.start = start


class Data:
    """A rank's inputs of `token`, read when the last participant had started."""

    __slots__ = ("token", "rank", "tensors")

    def __init__(self, token, rank, tensors):
        self.token = token
        self.rank = rank
        self.tensors = tensors


class Arrive:
    """A rank's host reached host rendezvous `key` (object collectives, gloo collectives on CPU tensors, NCCL
    communicator set-up) at host time `time`."""

    __slots__ = ("key", "rank", "ranks", "group_name", "kind", "desc", "sig", "frames", "time", "clock",
                 "payload")

    def __init__(self, key, rank, ranks, group_name, kind, desc, sig, frames, time, clock, payload):
        self.key = key
        self.rank = rank
        self.ranks = ranks
        self.group_name = group_name
        self.kind = kind
        self.desc = desc
        self.sig = sig
        self.frames = frames
        self.time = time
        self.clock = clock
        self.payload = payload
