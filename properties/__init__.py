"""Hypothesis strategies and properties for simulated-distributed tests (a library for users' own tests)."""
from .checks import deterministic, metric_below, no_hazards, refit_equals_reference, values_unaffected
from .strategies import (any_schedule, block_shapes, fault_sets, fp8_params, jitter_seeds, model_shapes,
                         nccl_profiles, parallel_degrees, pct_schedules, recipes, schedules, world_sizes)

__all__ = ["no_hazards", "values_unaffected", "deterministic", "metric_below", "refit_equals_reference", "schedules", "pct_schedules",
           "jitter_seeds", "any_schedule", "world_sizes", "parallel_degrees", "model_shapes", "block_shapes",
           "recipes", "fp8_params", "nccl_profiles", "fault_sets"]
