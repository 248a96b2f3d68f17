"""The errors simdist raises about the program under test (defined in simdist/engine/errors.py)."""
from .engine.errors import (CollectiveMismatch, Deadlock, DeterminismError, HazardError, InvalidDevice,
                            SimulationError, Stalled, UnsupportedOperation)

__all__ = ["SimulationError", "UnsupportedOperation", "CollectiveMismatch", "Deadlock", "HazardError",
           "DeterminismError", "Stalled", "InvalidDevice"]
