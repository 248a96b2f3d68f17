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
        self.ranks = [self.world.ranks[r] for r in range(n)]
        self.world.transport = self  # messages are delivered at once (deliver), no rank ever blocks here
        self.mail = {r: [] for r in range(n)}
        for r in self.ranks:
            r.current_device = r.rank

    def post(self, dst, msg):
        self.mail[dst].append(msg)

    def deliver(self):
        """Every posted message to its rank, until none is left (what turns do between ranks)."""
        while any(self.mail.values()):
            for r in self.ranks:
                m, self.mail[r.rank] = self.mail[r.rank], []
                r.deliver(m)

    def rank(self, i=0):
        return self.ranks[i]

    def stream(self, i=0, new=False):
        dev = self.ranks[i].device()
        return dev.new_stream() if new else dev.default_stream

    def malloc(self, nbytes, stream, i=None):
        dev = stream.dev
        return dev.memory.malloc(nbytes, stream)

    def region(self, alloc, lo=0, hi=None):
        return ByteRange(alloc, lo, hi, device=alloc.allocator.owner.device(alloc.allocator.device_index))

    def kernel(self, stream, reads=(), writes=(), fn=None, name="k", dur=None, rank=None):
        rank = self.ranks[stream.dev.rank] if rank is None else rank
        return launch(rank, stream, name, "kernel", fn, list(reads), list(writes), 0, dur=dur)

    def fill(self, region, value):
        """A kernel body that writes `value` into every byte of the region."""
        view = region._inner
        return lambda: view.fill_(value)

    def run_all(self):
        """Deliver messages and run every rank's device work until nothing moves."""
        while True:
            self.deliver()
            ran = [r.drain(INF) for r in self.ranks]
            if not any(ran) and not any(self.mail.values()):
                return

    def hazards(self):
        out = []
        for r in self.ranks:
            r.detector.finish()
            out += r.detector.order
        return out

    def ordered(self, a, b):
        return a.stream.dev.owner.tokens.ordered(a, b) if a.stream.dev.owner is b.stream.dev.owner else \
            b.stream.dev.owner.tokens.ordered(a, b)


@pytest.fixture
def sim():
    return Sim()


@pytest.fixture
def make_sim():
    return Sim
