"""How long a training step takes, from its arithmetic (pure): FLOPs per device over the chip's peak at an assumed
model FLOPs utilisation (MFU).

Two uses, two MFUs, neither measured by us:
- EXPECTED_MFU sizes what waits on a step, such as the preemption save (core/preemption.py: every host finishes
  the step it is in before they agree on a step to save). The tuned Trillium recipes measure 46 % (llama3-8b on
  v6e-16: 419.485 of 918 TFLOP/s/device) and 48 % (llama3-70b on v6e-32: 443.385), core/recipes.py; 40 % is
  a little slower than both.
- MIN_MFU bounds a run from above (the RayJob's deadline, core/run_time.run_deadline_seconds): 10 %, four to five
  times slower than the recipes, so only a run that has stopped making progress reaches the bound.

FLOPs per device per step: 6 x parameters x tokens (forward and backward of every weight, the count MaxText's
`calculate_tflops_training_per_device` starts from) plus the attention scores and their use, 12 x layers x
sequence x query width per token, counted without the causal half (an upper estimate). For the two recipes this
is within 10 % of what MaxText reports per step (tflops_per_device x seconds; tests/core/test_run_time.py).
"""
from __future__ import annotations

import math

from core.planner import Plan

EXPECTED_MFU = 0.40
MIN_MFU = 0.10


def tokens_per_device(plan: Plan) -> float:
    return plan.per_device_batch_size * plan.max_target_length


def step_flops_per_device(plan: Plan) -> float:
    model = plan.model
    tokens = tokens_per_device(plan)
    dense = 6 * model.param_count * tokens
    attention = 12 * model.num_layers * plan.max_target_length * model.num_query_heads * model.head_dim * tokens
    return dense + attention


def step_seconds(plan: Plan, mfu: float = EXPECTED_MFU) -> float:
    """Seconds per step at `mfu` of the device's peak bf16 rate (a TPU7x chip is two devices)."""
    generation = plan.shape.generation
    peak_per_device = generation.peak_bf16_tflops_per_chip * 1e12 / generation.devices_per_chip
    return step_flops_per_device(plan) / (peak_per_device * mfu)


# What a run spends before its first step and that no step count bounds: the RayJob's cluster coming up (the
# slice pools scale from zero), image pulls and the lock install, the smoke test, MaxText's compile, restoring a
# checkpoint. An allowance, not a measurement.
STARTUP_ALLOWANCE_S = 3600
INT32_MAX = 2**31 - 1


def run_deadline_seconds(plan: Plan, *, steps: int, attempts: int, seconds_per_save: float,
                         checkpoint_period: int) -> int:
    """A wall-clock bound no healthy run reaches: the startup allowance, then `attempts` whole runs (as if every
    failure the run may recover from came at its last step with nothing saved) at MIN_MFU, each with its periodic
    saves. Only a run that stopped making progress (a hang) reaches it."""
    saves = math.ceil(steps / max(checkpoint_period, 1))
    per_attempt = steps * step_seconds(plan, MIN_MFU) + saves * seconds_per_save
    return min(math.ceil(STARTUP_ALLOWANCE_S + attempts * per_attempt), INT32_MAX)
