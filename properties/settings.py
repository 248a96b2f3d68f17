"""Hypothesis settings profiles: `ci` (derandomized, fast), `dev`, `nightly` (many examples, shared database).

Chosen by `--simdist-profile`, else the SIMDIST_HYPOTHESIS_PROFILE environment variable, else `dev`.
All profiles disable the per-example deadline: a simulated run's wall time says nothing about the program.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]

settings.register_profile("ci", derandomize=True, max_examples=25, deadline=None, database=None,
                          suppress_health_check=_SUPPRESS, print_blob=True)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True)
settings.register_profile(
    "nightly", max_examples=2000, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True,
    database=DirectoryBasedExampleDatabase(os.environ.get("SIMDIST_HYPOTHESIS_DB", ".hypothesis/simdist-shared")))


def load_profile(name=None):
    name = name or os.environ.get("SIMDIST_HYPOTHESIS_PROFILE") or "dev"
    settings.load_profile(name)
    return name
