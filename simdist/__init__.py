"""simdist: simulated-distributed, deterministic testing of PyTorch stream and NCCL code on the CPU."""
from . import guard as _guard

_guard.load()  # autograd on simulated CUDA tensors (a CPU build of torch needs simdist's fake CUDA guard)
from .api import RunResult, run, run_script, spawn
from .errors import (CollectiveMismatch, Deadlock, DeterminismError, HazardError, SimulationError,
                     UnsupportedOperation)
from .hazards import Access, Hazard
from .policies import PCT, Choice, Jitter, NoJitter, Policy, Replay, Targeted, make_policy

__all__ = ["run", "run_script", "spawn", "RunResult", "Hazard", "Access", "SimulationError", "UnsupportedOperation", "CollectiveMismatch",
           "Deadlock", "HazardError", "DeterminismError", "Policy", "Jitter", "NoJitter", "PCT", "Choice", "Replay",
           "Targeted", "make_policy"]
__version__ = "0.1.0"
