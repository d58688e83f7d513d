"""MaxText keys a run adds (`--set KEY=VALUE`) that change the step's memory: which the planner takes into its
request (estimated, or laid out), which it passes through and names as not estimated."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from core.errors import PlanError

# Plan and PlanRequest in the annotations below are core.planner's, not imported: the planner imports this module
# (its compile command repeats the keys), and annotations are never evaluated here (from __future__ above).

# Estimated (and laid out): ici_context_parallelism (weights sharded over it as over FSDP: MaxText base.yml
# logical_axis_rules put `embed` on fsdp and context; the tokens per device do not change, the sequence is split
# and the batch is not), num_vocab_tiling (the loss over this many chunks of the tokens: maxtext
# utils/vocabulary_tiling.py), mu_dtype (optax adamw's first moment; the second stays in weight_dtype),
# eval_per_device_batch_size (the eval step's batch, estimated forward only when the run evaluates).
# Laid out, not estimated: ici_sequence_parallelism. Passed through, not estimated (the plan names them; the
# compile decides): quantization and the rest of MEMORY_KEYS_NOT_ESTIMATED. MaxText 0.2.5 base.yml has each key.
_LIFTED = {"ici_context_parallelism": "ici_context", "ici_sequence_parallelism": "ici_sequence",
           "num_vocab_tiling": "num_vocab_tiling", "mu_dtype": "mu_dtype",
           "eval_per_device_batch_size": "eval_per_device_batch_size"}
LIFTED_KEYS = tuple(_LIFTED)
MEMORY_KEYS_NOT_ESTIMATED = (
    "quantization", "use_qwix_quantization", "quantize_logits_proj", "context_parallel_strategy",
    "gradient_accumulation_steps", "optimizer_memory_host_offload", "parameter_memory_host_offload",
    "opt_type", "dtype", "logits_dot_in_fp32", "cast_logits_to_fp32", "scan_layers", "dcn_context_parallelism",
    "dcn_sequence_parallelism", "ici_tensor_sequence_parallelism", "ici_autoregressive_parallelism",
    "ici_pipeline_parallelism", "dcn_pipeline_parallelism", "num_layers_per_pipeline_stage",
    "shard_optimizer_over_data",
)


def with_maxtext_keys(request: PlanRequest, extra: Mapping[str, str]) -> tuple[PlanRequest, dict[str, str]]:
    """The request with the memory-relevant MaxText keys of `extra` taken in, and the keys left for the run.

    The lifted keys become planned keys (the plan emits them, sized into the estimate and the mesh); the keys the
    estimate does not model stay in the run's keys and are named in the plan (`unmodeled`), never refused."""
    changes: dict[str, object] = {}
    rest: dict[str, str] = {}
    for key, value in extra.items():
        field_name = _LIFTED.get(key)
        if field_name is None:
            rest[key] = value
            continue
        if field_name == "mu_dtype":
            changes[field_name] = value
            continue
        if field_name == "eval_per_device_batch_size":
            # The eval step's batch: estimated (forward only) when the run evaluates (PlanRequest.evaluates).
            try:
                changes[field_name] = float(value)
            except ValueError:
                raise PlanError(f"{key}={value!r} must be a number") from None
            if changes[field_name] < 0:
                raise PlanError(f"{key}={value!r} must be >= 0 (0: per_device_batch_size)")
            continue
        try:
            changes[field_name] = int(value)
        except ValueError:
            raise PlanError(f"{key}={value!r} must be a whole number") from None
    unmodeled = tuple(sorted((key, value) for key, value in rest.items() if key in MEMORY_KEYS_NOT_ESTIMATED))
    if unmodeled:
        changes["unmodeled"] = unmodeled
    return dataclasses.replace(request, **changes), rest


def maxtext_keys_of(chosen: Plan) -> dict[str, str]:
    """The lifted MaxText keys the plan sets (what `--set` gives to reproduce it)."""
    keys = chosen.overrides()
    return {key: keys[key] for key in _LIFTED if key in keys}
