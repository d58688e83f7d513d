"""HBM estimate per JAX device for MaxText training of a dense decoder (pure arithmetic), held to XLA's figures.

A device is a chip on every generation but TPU7x, whose two cores are two devices sharing the chip's HBM
(core/tpu_catalog.py, devices_per_chip).

Calibration: core/xla_calibration.json holds XLA's per-device HBM for real MaxText steps compiled ahead of time for
the real TPU targets (`python -m preview.compile --calibrate`, libtpu 0.0.42.1): libtpu's "Total hbm usage", what
the step needed before XLA recomputed tensors to fit, or what XLA said it needed when it did not fit.
tests/core/test_xla_calibration.py holds this estimate to those rows. Every term is a buffer XLA's own memory
report shows (the RESOURCE_EXHAUSTED report lists them by shape), none is a factor fitted per row:

- reserved: what the TPU runtime keeps on every device (libtpu's "reserved": 1.25 GiB on v4, 0.25 elsewhere).
- params + optimizer: parameter count x bytes(weight_dtype) / weight shards (FSDP over ICI and DCN x tensor),
  three times: AdamW's mu and nu follow weight_dtype (maxtext base.yml `mu_dtype`; optax keeps nu in the
  parameters' dtype). libtpu reports exactly this as the step's "arguments".
- gradients: one more sharded copy, in bf16 whatever weight_dtype: MaxText computes in bf16 (`dtype: bfloat16`)
  and the scanned layers accumulate their gradients in it (the report shows bf16[layers, ...] gradient stacks for
  fp32 weights); they become fp32 only in the optimizer update, in place of the old parameters.
- activations: what the remat policy keeps on device between forward and backward, per layer, in bf16. Per device
  this is per_device_batch x sequence x width whatever the tensor parallelism (each device holds `tensor` times
  more sequences but 1/`tensor` of each sharded width).
- the larger of two phases (the step's peak is in one of them, they do not overlap):
  - loss: the [batch, seq, vocab] logits in bf16 (`logits_dot_in_fp32: False`) and their bf16 gradient, both live
    when the backward pass starts (4 bytes per logit), plus each vocabulary matrix (the embedding and the output
    head; one when tied, Qwen3) gathered whole over FSDP in bf16 and its whole bf16 gradient before the
    reduce-scatter (4 bytes per element, / tensor), plus the final hidden states the head multiplies, gathered
    whole over tensor parallelism, in bf16, and their gradient summed over the vocabulary shards in fp32 (6 bytes
    per element: per_device_batch x tensor x sequence x width);
  - layer: one decoder layer's weights gathered whole and their whole gradient (4 bytes per parameter, / tensor),
    its intermediates recomputed in bf16, and with plain dot-product attention the fp32 [batch, heads, seq, seq]
    scores (flash attention never builds them).

Accuracy: within 10 % of XLA for every step XLA compiles under memory pressure (refused, recomputed, or above 80 %
of the plannable bytes), and never more than 10 % below XLA for any row. Far from the limit the estimate is an
upper bound, up to ~1.5x for Qwen3: there XLA spends spare HBM on its schedule and its peak is not a need (the same
per-device step, qwen3-0.6b at batch 4 on v6e 2x4 slices, peaks at 8.84 GiB on two slices and 11.74 on one).

The limit is what XLA compiles against per device (libtpu's "program HBM usage: P / LIMIT": 31.25 GiB of a v6e
chip's 32, 15.75 of a v5e's 16), XLA_HBM_LIMIT_GIB below, not a fraction of the chip's HBM. Above 95 % of it XLA
recomputes tensors to fit (libtpu: "rematerialization limit = 95% hbm - arguments ..."), which slows every step.
A plan is accepted when its estimate plus the estimate's own error (ESTIMATE_ERROR) stays below that point; what
the estimate refuses, XLA can still be asked: `python -m preview.compile ...` (the refusal prints the command).
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import PlanError
from core.presets import ModelPreset

GIB = 1024**3
ACTIVATION_BYTES = 2   # MaxText `dtype: bfloat16` activations
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# bf16 logits (MaxText logits_dot_in_fp32=False) kept for the backward pass + their bf16 gradient; the fp32 cast
# (cast_logits_to_fp32) and the softmax are fused into the loss and its gradient.
LOGIT_BYTES = 4
# A gathered bf16 copy + a whole bf16 gradient, per element of a vocabulary matrix or of a decoder layer.
GATHERED_AND_GRADIENT_BYTES = 4
GRADIENT_BYTES = 2     # sharded gradients, bf16 (see the module docstring)
HIDDEN_BYTES = 6       # the head's input in bf16 + its gradient in fp32

# Per device, libtpu 0.0.42.1 (the "hbm" section of core/xla_calibration.json, measured by
# `python -m preview.compile --calibrate` and compared with this table by tests/core/test_xla_calibration.py).
XLA_HBM_LIMIT_GIB = {"v4": 30.75, "v5e": 15.75, "v5p": 95.74, "v6e": 31.25, "tpu7x": 94.75}
RUNTIME_RESERVED_GIB = {"v4": 1.25, "v5e": 0.252, "v5p": 0.257, "v6e": 0.254, "tpu7x": 0.254}
# libtpu: "XLA::TPU post optimization rematerialization limit 29.63G = 95% hbm (29.68G) - (arguments ...)".
REMAT_THRESHOLD = 0.95
# How far the estimate may be below XLA near the limit (tests/core/test_xla_calibration.py holds it there).
ESTIMATE_ERROR = 0.10

# Tensors each named MaxText remat policy keeps on device (maxtext base.yml lists the policies;
# `decoder_layer_input` is always kept unless offloaded, it is where recomputation restarts).
_POLICY_SAVES: dict[str, frozenset[str]] = {
    "full": frozenset({"decoder_layer_input"}),
    "minimal_offloaded": frozenset({"decoder_layer_input"}),
    "qkv_proj_offloaded": frozenset({"decoder_layer_input"}),
    "save_out_proj": frozenset({"decoder_layer_input", "out_proj"}),
    "save_qkv_proj": frozenset({"decoder_layer_input", "query_proj", "key_proj", "value_proj"}),
    "save_dot_except_mlp": frozenset({"decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj"}),
    "save_dot_except_mlpwi": frozenset(
        {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwo"}),
    "minimal": frozenset(
        {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"}),
}
REMAT_POLICIES = tuple(_POLICY_SAVES) + ("custom",)
# Tensors the named offloading policies move to pinned host memory (MaxText 0.2.5 layers/nnx_decoders.py: both
# use jax.checkpoint_policies.save_and_offload_only_these_names(..., offload_dst="pinned_host"); names of other
# architectures' fused projections, kv_proj/qkv_proj/mlpwi, do not occur in the dense decoders planned here).
_POLICY_OFFLOADS: dict[str, frozenset[str]] = {
    "qkv_proj_offloaded": frozenset({"query_proj", "key_proj", "value_proj"}),
    "minimal_offloaded": frozenset({"query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1",
                                    "mlpwo"}),
}
OFFLOADABLE = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj",
               "mlpwi_0", "mlpwi_1", "mlpwo")


def _widths(model: ModelPreset) -> dict[str, int]:
    """Elements per token of each tensor a remat policy can save."""
    return {
        "decoder_layer_input": model.emb_dim,
        "query_proj": model.num_query_heads * model.head_dim,
        "key_proj": model.num_kv_heads * model.head_dim,
        "value_proj": model.num_kv_heads * model.head_dim,
        "out_proj": model.emb_dim,
        "mlpwi_0": model.mlp_dim,
        "mlpwi_1": model.mlp_dim,
        "mlpwo": model.emb_dim,
    }


def saved_tensors(remat_policy: str, offload: tuple[str, ...]) -> frozenset[str]:
    """Tensors kept in HBM per layer. `custom` keeps only the decoder-layer input (MaxText's default
    location for it is 'device', every other tensor defaults to 'remat') unless it is offloaded."""
    bad = [t for t in offload if t not in OFFLOADABLE]
    if bad:
        raise PlanError(f"remat offload {','.join(bad)} unknown; allowed: {', '.join(OFFLOADABLE)}")
    if remat_policy == "custom":
        return frozenset({"decoder_layer_input"}) - set(offload)
    if remat_policy not in _POLICY_SAVES:
        raise PlanError(f"remat_policy={remat_policy!r} unknown; allowed: {', '.join(REMAT_POLICIES)}")
    if offload:
        raise PlanError(f"remat offload ({','.join(offload)}) needs remat_policy=custom, not {remat_policy!r}")
    return _POLICY_SAVES[remat_policy]


def offloaded_tensors(remat_policy: str, offload: tuple[str, ...]) -> frozenset[str]:
    """Tensors per layer kept in the host's memory between forward and backward (not in HBM)."""
    if remat_policy == "custom":
        return frozenset(offload)
    return _POLICY_OFFLOADS.get(remat_policy, frozenset())


def offloaded_bytes_per_device(model: ModelPreset, per_device_batch_size: float, seq_len: int,
                               remat_policy: str, remat_offload: tuple[str, ...]) -> int:
    """Host bytes one device's offloaded activations take: per layer, tokens x the offloaded widths, in bf16."""
    widths = _widths(model)
    offloaded = sum(widths[t] for t in offloaded_tensors(remat_policy, remat_offload))
    return int(per_device_batch_size * seq_len * offloaded * model.num_layers * ACTIVATION_BYTES)


def xla_hbm_limit_gib(generation: str, hbm_gib_per_device: float) -> float:
    """Per-device HBM XLA compiles against (measured per generation; else the device's HBM less 1 GiB)."""
    return XLA_HBM_LIMIT_GIB.get(generation, hbm_gib_per_device - 1)


@dataclass(frozen=True)
class MemoryEstimate:
    reserved: int
    params: int
    optimizer: int
    gradients: int
    activations: int
    loss: int           # the loss phase: logits and the vocabulary matrices
    layer: int          # the layer phase: one layer's gathered weights, their gradient, its intermediates
    hbm: int            # XLA's per-device limit
    generation: str = ""

    @property
    def peak_phase(self) -> str:
        return "loss" if self.loss >= self.layer else "layer"

    @property
    def total(self) -> int:
        return (self.reserved + self.params + self.optimizer + self.gradients + self.activations
                + max(self.loss, self.layer))

    @property
    def usable(self) -> int:
        """The most a plan may be estimated at: XLA's recompute point less this estimate's own error."""
        return int(self.hbm * REMAT_THRESHOLD / (1 + ESTIMATE_ERROR))

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def describe(self) -> str:
        parts = [("reserved", self.reserved), ("params", self.params), ("optimizer", self.optimizer),
                 ("gradients", self.gradients), ("activations", self.activations),
                 (self.peak_phase, max(self.loss, self.layer))]
        terms = " + ".join(f"{name} {value / GIB:.1f}" for name, value in parts)
        relation = "<=" if self.fits else ">"
        return (f"{terms} = {self.total / GIB:.1f} GiB per device (estimated) {relation} {self.usable / GIB:.1f} GiB "
                f"plannable ({REMAT_THRESHOLD:.0%} of the {self.hbm / GIB:.2f} GiB XLA compiles against on "
                f"{self.generation or 'this TPU'}, where XLA starts recomputing, less the estimate's "
                f"{ESTIMATE_ERROR:.0%} error)")


def estimate(model: ModelPreset, *, fsdp: int, tensor: int, per_device_batch_size: float, seq_len: int,
             remat_policy: str, remat_offload: tuple[str, ...], weight_dtype: str, attention: str,
             generation: str, hbm_gib_per_device: float) -> MemoryEstimate:
    """Bytes per device. fsdp: FSDP shards (ICI x DCN); tensor: ICI tensor parallelism."""
    if weight_dtype not in DTYPE_BYTES:
        raise PlanError(f"weight_dtype={weight_dtype!r} unknown; allowed: {', '.join(DTYPE_BYTES)}")
    shards = fsdp * tensor
    weights = model.param_count * DTYPE_BYTES[weight_dtype] / shards
    tokens = per_device_batch_size * seq_len
    widths = _widths(model)
    saved = sum(widths[t] for t in saved_tensors(remat_policy, remat_offload))
    matrices = 1 if model.tied_embeddings else 2
    loss = (tokens * model.vocab_size * LOGIT_BYTES
            + matrices * model.vocab_size * model.emb_dim * GATHERED_AND_GRADIENT_BYTES / tensor
            + tokens * tensor * model.emb_dim * HIDDEN_BYTES)
    scores = (per_device_batch_size * model.num_query_heads * seq_len * seq_len * 4
              if attention == "dot_product" else 0)
    layer = (model.params_per_layer * GATHERED_AND_GRADIENT_BYTES / tensor
             + sum(widths.values()) * tokens * ACTIVATION_BYTES + scores)
    return MemoryEstimate(
        reserved=int(RUNTIME_RESERVED_GIB.get(generation, 0.25) * GIB),
        params=int(weights),
        optimizer=int(2 * weights),
        gradients=int(model.param_count * GRADIENT_BYTES / shards),
        activations=int(tokens * saved * model.num_layers * ACTIVATION_BYTES),
        loss=int(loss),
        layer=int(layer),
        hbm=int(xla_hbm_limit_gib(generation, hbm_gib_per_device) * GIB),
        generation=generation,
    )
