"""Hypothesis strategies and properties for simulated-distributed tests (a library for users' own tests)."""
from .checks import (PropertyFailure, deterministic, dropped_sync_is_reported, kernel_matches_reference, metric_below, no_hazards,
                     refit_deterministic, refit_equals_reference, run_kernel, run_refit, schedule_free_without_hazards,
                     values_unaffected)
from .settings import budget, budget_for, fuzz, load_profile
from .strategies import (SYNCS, Schedule, any_schedule, block_shapes, choice_schedules, fault_sets, fp8_params,
                         jitter_seeds, kernel_cases, model_shapes, nccl_profiles, parallel_degrees, pct_schedules,
                         recipes, refit_cases, run_schedules, schedules, world_sizes)

__all__ = ["no_hazards", "values_unaffected", "deterministic", "metric_below", "refit_equals_reference",
           "refit_deterministic", "schedule_free_without_hazards", "kernel_matches_reference", "dropped_sync_is_reported", "run_refit",
           "run_kernel", "PropertyFailure", "budget", "budget_for", "fuzz", "load_profile", "schedules",
           "pct_schedules", "jitter_seeds", "any_schedule", "choice_schedules", "run_schedules", "Schedule",
           "world_sizes", "parallel_degrees", "model_shapes", "block_shapes", "recipes", "fp8_params",
           "nccl_profiles", "fault_sets", "refit_cases", "kernel_cases", "SYNCS"]
