"""Hypothesis settings profiles and example budgets: `ci` (small, derandomized, no database), `dev`, `nightly`
(large, with the shared example database).

Chosen by `--simdist-profile`, else the SIMDIST_HYPOTHESIS_PROFILE environment variable, else `dev`.
All profiles disable the per-example deadline (a simulated run's wall time says nothing about the program) and
print Hypothesis's reproduce blob.

Budgets come from the profile, never from a test: a property declares its relative cost (`@fuzz(cost=5)`: one
example costs about as much as five of a cost-1 property) and gets `budget_for(profile, cost)` examples, so every
property runs EXAMPLES["nightly"] / EXAMPLES["ci"] = 100 times more examples nightly than in CI.

The example database (`nightly`; `dev` keeps Hypothesis's local default) is named by SIMDIST_HYPOTHESIS_DB:
a directory (default `.hypothesis/simdist-shared`, shared by every worker of one host), `dir:PATH`,
`redis://HOST:PORT/DB` (Hypothesis's RedisExampleDatabase: shared by the workers of several hosts; needs the
`redis` package, in the `test` extra) or `none`.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILES = ("ci", "dev", "nightly")
#: examples of a cost-1 property under each profile
EXAMPLES = {"ci": 20, "dev": 200, "nightly": 2000}
#: the most a property may declare: its nightly budget stays >= 50x its ci budget (ci never drops below 1)
MAX_COST = 20
DB_ENV = "SIMDIST_HYPOTHESIS_DB"
PROFILE_ENV = "SIMDIST_HYPOTHESIS_PROFILE"
DEFAULT_DB = os.path.join(".hypothesis", "simdist-shared")
REDIS_PREFIX = b"simdist-hypothesis:"

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
             HealthCheck.filter_too_much]
# no `explain` phase: after shrinking it re-runs the failure with each argument varied (hundreds of simulated runs);
# the replay command, the reproduce blob and the trace say more about a simulated failure
_COMMON = dict(deadline=None, suppress_health_check=_SUPPRESS, print_blob=True,
               phases=[p for p in Phase if p != Phase.explain])
_loaded = None


def database_from_url(url=None):
    """The example database a URL names (see the module docstring); None for `none`."""
    url = os.environ.get(DB_ENV, "") if url is None else url
    if url.lower() in ("none", "off"):
        return None
    if url.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis
        except ImportError as e:  # not an ImportError: the pytest plugin must not take it for a missing simdist
            raise RuntimeError(f"{DB_ENV}={url} needs the `redis` package (pip install redis; in the test "
                               "extra)") from e
        from hypothesis.extra.redis import RedisExampleDatabase
        return RedisExampleDatabase(redis.Redis.from_url(url), key_prefix=REDIS_PREFIX)
    path = url[len("dir:"):] if url.startswith("dir:") else (url or DEFAULT_DB)
    return DirectoryBasedExampleDatabase(path)


def _register(db_url=None):
    # parent: Hypothesis's own defaults, never the profile loaded now (registering while `ci` is loaded would
    # otherwise inherit its derandomize and missing database)
    base = settings.get_profile("default")
    settings.register_profile("ci", base, max_examples=EXAMPLES["ci"], derandomize=True, database=None, **_COMMON)
    settings.register_profile("dev", base, max_examples=EXAMPLES["dev"], derandomize=False, **_COMMON)
    settings.register_profile("nightly", base, max_examples=EXAMPLES["nightly"], derandomize=False,
                              database=database_from_url(db_url), **_COMMON)


_register("none")  # the nightly database is opened by load_profile("nightly"), not at import


def load_profile(name=None):
    """Load a profile (default: $SIMDIST_HYPOTHESIS_PROFILE, else `dev`); `nightly` opens $SIMDIST_HYPOTHESIS_DB."""
    global _loaded
    name = name or os.environ.get(PROFILE_ENV) or "dev"
    if name not in PROFILES:
        raise ValueError(f"unknown Hypothesis profile {name!r}; simdist's are {PROFILES}")
    _register()
    settings.load_profile(name)
    _loaded = name
    return name


def current_profile_name():
    return _loaded or os.environ.get(PROFILE_ENV) or "dev"


def budget_for(profile, cost=1):
    """Examples of a property of this cost under a profile."""
    if not 1 <= cost <= MAX_COST:
        raise ValueError(f"a property's cost must be in [1, {MAX_COST}], got {cost}")
    return max(1, round(EXAMPLES[profile] / cost))


def budget(cost=1, profile=None):
    """The current profile's settings with this cost's example budget (for `@given` tests and `find`)."""
    name = profile or current_profile_name()
    if _loaded is None and profile is None:
        load_profile(name)
    return settings(settings.get_profile(name), max_examples=budget_for(name, cost))


def fuzz(cost=1):
    """Decorator for a property test (above `@given`): the profile's budget for this cost and the pytest mark
    `fuzz` (what `ci/fuzz` selects; its summary reads the cost back to print each profile's budget)."""
    import pytest

    def deco(test):
        test = budget(cost)(test)
        return pytest.mark.fuzz(cost=cost)(test)
    return deco
