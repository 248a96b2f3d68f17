"""Engine unit tests: the engine driven with plain ids and byte ranges, no torch API and no simdist.run, the way
PyTorch's own sanitizer tests drive its EventHandler (test/test_cuda_sanitizer.py)."""
import pytest

from simdist.engine.launch import launch
from simdist.engine.policies import NoJitter
from simdist.engine.regions import ByteRange
from simdist.engine.scheduler import INF
from simdist.engine.world import World


class Sim:
    """A world of `n` ranks, each on its own device, with helpers to launch kernels over byte ranges."""

    def __init__(self, n=1, nccl="2.8", policy=None):
        self.world = World(n, 0, policy or NoJitter(), nccl, "nan")
        self.world.policy.bind(self.world)
        self.ranks = self.world.ranks
        for r in self.ranks:
            r.current_device = r.rank

    def rank(self, i=0):
        return self.ranks[i]

    def stream(self, i=0, new=False):
        dev = self.ranks[i].device()
        return dev.new_stream() if new else dev.default_stream

    def malloc(self, nbytes, stream, i=None):
        dev = stream.dev
        return dev.memory.malloc(nbytes, stream)

    def region(self, alloc, lo=0, hi=None):
        return ByteRange(alloc, lo, hi, device=self.world.ranks[alloc.allocator.rank].device(alloc.allocator.device_index))

    def kernel(self, stream, reads=(), writes=(), fn=None, name="k", dur=None, rank=None):
        rank = self.ranks[stream.dev.rank] if rank is None else rank
        return launch(rank, stream, name, "kernel", fn, list(reads), list(writes), 0, dur=dur)

    def fill(self, region, value):
        """A kernel body that writes `value` into every byte of the region."""
        view = region._inner
        return lambda: view.fill_(value)

    def run_all(self):
        self.world.drain(INF)

    def hazards(self):
        self.world.detector.finish()
        return list(self.world.detector.order)

    def ordered(self, a, b):
        return self.world.tokens.ordered(a, b)


@pytest.fixture
def sim():
    return Sim()


@pytest.fixture
def make_sim():
    return Sim
