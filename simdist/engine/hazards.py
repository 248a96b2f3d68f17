"""Hazard records and their text report."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .frames import format_frames, user_frames

KINDS = ("read-after-write", "write-after-read", "write-after-write", "reuse-after-free", "host-read")

_ADVICE = {
    "read-after-write": (
        "The reader can run before the writer has finished. Make the reader's stream wait for the writer's:\n"
        "    reader_stream.wait_stream(writer_stream)   # or: ev.record(writer_stream); reader_stream.wait_event(ev)\n"
        "and, if the tensor was allocated on the writer's stream, tensor.record_stream(reader_stream).\n"
        "For an async collective call work.wait() before reading its output."),
    "write-after-read": (
        "The writer can overwrite the tensor while the reader still reads it. Make the writer's stream wait for\n"
        "the reader's stream (wait_stream / wait_event), or call work.wait() before reusing a collective's input."),
    "write-after-write": (
        "Two writes race: which value survives depends on timing. Order the two streams with wait_stream / wait_event."),
    "reuse-after-free": (
        "The caching allocator gave this memory to a new tensor while another stream still used the old one.\n"
        "Call old_tensor.record_stream(other_stream) before dropping it (or keep it alive until that stream waits)."),
    "host-read": (
        "The host read a tensor before the device finished writing it. Synchronize the writer's stream\n"
        "(or make the current stream wait for it) before .item() / .cpu() / .tolist()."),
}


@dataclass
class Access:
    """One side of a hazard: who touched the memory, where, and how."""

    rank: int
    stream: str
    op: str
    is_write: bool
    shape: tuple
    dtype: str
    frames: tuple = field(repr=False, default=())
    seq: int = 0

    @property
    def stack(self):
        return user_frames(self.frames, limit=12)

    @property
    def site(self):
        st = user_frames(self.frames, limit=1)
        return st[0][:2] if st else ("?", 0)

    def describe(self):
        verb = "writing" if self.is_write else "reading"
        return (f"rank {self.rank}, stream {self.stream}, op #{self.seq} {self.op} {verb} "
                f"{self.dtype}{list(self.shape)}")


@dataclass
class Hazard:
    """Two conflicting accesses with no happens-before order between them.

    `observed` is True when this run's timing went the bad way and the bytes
    involved actually differed; False means the race is real but this
    schedule happened to hide it (`possible`).
    """

    kind: str
    first: Access
    second: Access
    device: str
    observed: bool = False
    count: int = 1
    first_op_key: tuple = field(default=(), repr=False)
    second_op_key: tuple = field(default=(), repr=False)
    slack_ns: Optional[int] = field(default=None, repr=False)  # first's end - second's end: > 0 means damage order

    @property
    def key(self):
        return (self.kind, self.first.site, self.second.site)

    def __str__(self):
        status = ("OBSERVED: this run's values were damaged" if self.observed
                  else "possible: this schedule hid it; another can show it")
        lines = [
            "=" * 78,
            f"simdist: {self.kind} hazard on {self.device} [{status}]",
            f"  occurrences: {self.count}",
            "",
            f"First access: {self.first.describe()}",
            format_frames(self.first.frames),
            "",
            f"Second access, not ordered after the first: {self.second.describe()}",
            format_frames(self.second.frames),
            "",
            "How to fix: " + (_HOST_WRITE_ADVICE if self.kind == "write-after-read" and
                              self.second.stream.endswith("/host") else _ADVICE[self.kind]),
            "=" * 78,
        ]
        return "\n".join(lines)


_HOST_WRITE_ADVICE = (
    "The host overwrote a pinned buffer that an asynchronous (non_blocking=True) host-to-device copy had not read\n"
    "yet: the copy reads page-locked memory when it runs, not when it is issued. Before reusing the buffer, wait\n"
    "for the copy: ev = torch.cuda.Event(); ev.record() after the copy, then ev.synchronize() (or\n"
    "stream.synchronize()); or keep one pinned buffer per copy in flight.")


def hazard_summary(hazards):
    """(how many, one line each for the first five, then "... and k more"): what an error note says of a rank's
    hazards, as plain data that travels between rank processes (a Hazard holds frames)."""
    out = []
    for h in hazards[:5]:
        fs, ss = h.first.site, h.second.site
        out.append(f"  {h.kind}{' [OBSERVED: values damaged]' if h.observed else ''}: {h.first.op} "
                   f"({fs[0]}:{fs[1]}) then {h.second.op} ({ss[0]}:{ss[1]}), not ordered")
    if len(hazards) > 5:
        out.append(f"  ... and {len(hazards) - 5} more")
    return len(hazards), out


def hazards_before_error_note(rank, hazards, failed=None):
    """The note an exception of rank `rank`'s program gets when the rank had already found hazards: a crash on
    values a race damaged (a garbage split size, a NaN check) says what damaged them. None when there are none.
    `hazards`: the Hazards, or their hazard_summary. `failed`: the rank whose program raised, when that is
    another one (the damaged values may have come to it through a collective: f-series f3)."""
    n, body = hazards if isinstance(hazards, tuple) else hazard_summary(hazards)
    if not n:
        return None
    before = "this exception" if failed in (None, rank) else f"rank {failed}'s exception"
    lines = [f"simdist: rank {rank} had found {n} hazard(s) before {before}; it may follow from "
             "them (the full reports come with a run that completes):"]
    return "\n".join(lines + body)
