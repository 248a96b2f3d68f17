"""The simulated world: what every rank of a run shares (its configuration) and the ranks themselves.

Ranks share no state at run time (simdist/engine/rank.py); a transport (simdist/ranks/) runs them and carries
their messages. After the run the world gathers what the ranks found: finished collectives, the tokens each
resolved (a clock can name a collective only its participants could resolve), the hazards.
"""
from __future__ import annotations

import contextlib

from .collectives import Group, check_finished, pending_summary
from .errors import Deadlock
from .rank import Rank
from .streams import Stream


class World:
    def __init__(self, world_size, seed, policy, nccl_profile, poison, device_count=None, avoid_record_streams=False,
                 stream_class=Stream, group_class=Group, on_new_device=None, device_work=contextlib.nullcontext,
                 local_ranks=None):
        self.world_size = world_size
        self.device_count = device_count or world_size
        self.seed = seed
        self.policy = policy
        self.nccl_profile = nccl_profile
        self.avoid_record_streams = avoid_record_streams
        self.poison = poison
        self.stream_class = stream_class  # the torch face's Stream subclass (torch.cuda.Stream's API)
        self.group_class = group_class  # the torch face's Group subclass (torch.distributed's ProcessGroup API)
        self.on_new_device = on_new_device or (lambda device: None)
        self.device_work = device_work  # context in which queued kernels run (the face: no dispatch mode)
        self.transport = None  # how ranks run (simdist/ranks/), set by the runner
        self.program_store = None  # the store a program's rendezvous gives its ranks (the torch face makes it)
        self.fatal = None
        local = range(world_size) if local_ranks is None else local_ranks
        self.ranks = {r: Rank(self, r) for r in local}  # the ranks simulated in this process

    @staticmethod
    def deadlock(descriptions, pending_lines):
        """The Deadlock of a run whose ranks all wait for each other."""
        lines = ["every live rank is waiting and none can proceed:", *descriptions]
        extra = pending_summary(list(dict.fromkeys(pending_lines)))  # every participant reports its instances
        if extra:
            lines.append(extra)
        return Deadlock("\n".join(lines))

    @staticmethod
    def check_finished(pending_lines):
        check_finished(list(dict.fromkeys(pending_lines)))
