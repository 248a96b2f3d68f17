"""simdist: simulated-distributed, deterministic testing of PyTorch stream and NCCL code on the CPU."""
from .faces import guard as _guard

_guard.load()  # autograd on simulated CUDA tensors (a CPU build of torch needs simdist's fake CUDA guard)
from .api import RunResult, run, run_script, spawn  # noqa: E402
from .engine.hazards import Access, Hazard  # noqa: E402
from .engine.policies import PCT, Choice, Jitter, NoJitter, Policy, Replay, Targeted, make_policy  # noqa: E402
from .errors import (CollectiveMismatch, Deadlock, DeterminismError, HazardError, SimulationError,  # noqa: E402
                     Stalled, UnsupportedOperation)

__all__ = ["run", "run_script", "spawn", "RunResult", "Hazard", "Access", "SimulationError", "UnsupportedOperation",
           "CollectiveMismatch", "Deadlock", "HazardError", "DeterminismError", "Stalled", "Policy", "Jitter", "NoJitter", "PCT",
           "Choice", "Replay", "Targeted", "make_policy"]
__version__ = "0.1.0"
