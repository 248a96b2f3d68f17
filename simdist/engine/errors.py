"""Errors the simulator raises about the program under test."""


class SimulationError(RuntimeError):
    """Base of every error simdist raises about the simulated program.

    It subclasses RuntimeError because that is what real torch raises for the
    same misuse (wrong device, unsupported op), so user code that catches
    RuntimeError behaves the same inside and outside the simulator.
    """


class InvalidDevice(SimulationError):
    """A device index past the world's device count (CUDA's "invalid device ordinal"; the torch face raises a
    subclass that is also torch.AcceleratorError, what torch raises for it)."""


class UnsupportedOperation(SimulationError):
    """The program used a torch feature simdist does not model (never silently wrong)."""


class CollectiveMismatch(SimulationError):
    """Ranks issued different collectives at the same point of a process group."""


class NcclError(SimulationError):
    """NCCL refused the call (ProcessGroupNCCL raises torch.distributed.DistBackendError; the torch face raises
    a subclass of both)."""


class Deadlock(SimulationError):
    """Every live rank waits for something no other rank will ever do."""


class Stalled(SimulationError):
    """A rank has waited outside the simulation (a pipe, a queue, a threading primitive) for longer than the
    stall limit: no other rank can run meanwhile, so the run would never end (simdist/ranks/stall.py)."""


class HazardError(SimulationError):
    """Raised by RunResult.raise_for_hazards(): the run had unordered conflicting accesses."""

    def __init__(self, hazards):
        self.hazards = list(hazards)
        text = "\n\n".join(str(h) for h in self.hazards)
        super().__init__(f"{len(self.hazards)} hazard(s) found\n\n{text}")


class DeterminismError(SimulationError):
    """check_determinism=True found two runs of the same seed that differ."""


class _Abort(BaseException):
    """Unwinds a parked rank thread when the run is being torn down.

    BaseException so that `except Exception` in user code cannot swallow it.
    """
