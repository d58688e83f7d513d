"""HBM estimate per JAX device for MaxText training of a dense decoder (pure arithmetic), held to XLA's figures.

A device is a chip on every generation but TPU7x, whose two cores are two devices sharing the chip's HBM
(core/tpu_catalog.py, devices_per_chip).

Calibration: core/xla_calibration.json holds XLA's figures for real MaxText 0.2.5 steps compiled ahead of time for
the real TPU targets (`python -m preview.compile --calibrate`), each row with the jax/libtpu pair that compiled it;
tests/core/test_xla_calibration.py holds this estimate to them and benchmarks/planner_vs_xla.py prints the table.
Every term is a buffer XLA's own reports show (the RESOURCE_EXHAUSTED memory report lists them by shape; the
scheduler's peak at memory assignment sums them), none is a factor fitted per row:

- reserved: what the TPU runtime keeps on every device (libtpu's "reserved": 1.25 GiB on v4, 0.25 elsewhere).
- params + optimizer: the train state, XLA's "arguments": parameters in weight_dtype sharded over FSDP (ICI, context
  and DCN) x tensor ways, AdamW's nu in weight_dtype and mu in mu_dtype (maxtext base.yml: "Inherits from
  weight_dtype if unset"; optax keeps nu in the parameters' dtype). Exact: equal to libtpu's "arguments" on every
  fully compiled row.
- gradients: one more sharded copy in weight_dtype (a gradient has its parameter's dtype; MaxText's grad_dtype
  float32 keeps fp32 ones so). llama3-8b on one v6e-4 needs 34.1 GiB: with bf16 gradients the estimate would be
  3.7 GiB short of that.
- activations: what the remat policy keeps on device between forward and backward, per layer, in bf16 (offloaded
  tensors live in host memory). Per device this is per_device_batch x sequence x width whatever the tensor
  parallelism (each device holds `tensor` times more sequences but 1/`tensor` of each sharded width).
- the larger of two phases (the step's peak is in one of them):
  - loss: the [tokens, vocab] logits in bf16, 2 bytes per logit (`logits_dot_in_fp32: False`; the fp32 cast,
    the softmax and its gradient are fused and the gradient is written over the logits: llama3-8b at 12 x 8192
    tokens per device needs 30.2 GiB in all, where 4 bytes per logit alone would be 47), divided by
    num_vocab_tiling (maxtext/utils/vocabulary_tiling.py computes the loss in that many chunks of the tokens);
    the output head gathered whole over FSDP in bf16 and its whole gradient in fp32 before the reduce-scatter
    (6 bytes per element, / tensor; the embedding's turn comes at the end of the backward pass, not here); the
    final hidden states the head multiplies, gathered over tensor parallelism, in bf16, and their gradient in
    fp32 (6 bytes per element: tokens x tensor x width);
  - layer: the scanned decoder layer's working set: three layers' weights gathered whole in bf16 with their whole
    bf16 gradients (this layer, the next one's weights prefetched, the previous one's gradient being
    reduce-scattered), the layer's intermediates in bf16 (llama3-70b's need grows by 1.8 GiB per sequence of 8192
    tokens, one set of intermediates, not two), and with plain dot-product attention the fp32 [batch, heads, seq,
    seq] scores (flash attention never builds them).
- across slices with host offload: the offloaded activations of OFFLOADED_LAYERS_HELD_ACROSS_SLICES layers held on
  device (see there).

Accuracy (the calibration rows compiled with the workers' libtpu, XLA's need counted with the runtime's
reservation as the estimate counts it): on the rows the terms were chosen against, within 10 % of XLA's need for
every step near the limit (XLA's peak at least 75 % of its HBM) and never more than 10 % below it anywhere;
leave-one-out and on the four rows the margin was raised for, within ESTIMATE_ERROR (fitted to them); on the
compiles made after the model was frozen, what docs/planner.md reports. Far from the limit the estimate is an
upper bound: there XLA spends spare HBM on its schedule and its peak is not a need.

The limit is what XLA compiles against per device (libtpu's "program HBM usage: P / LIMIT": 31.25 GiB of a v6e
chip's 32, 15.75 of a v5e's 16), XLA_HBM_LIMIT_GIB below, not a fraction of the chip's HBM. Above 95 % of it XLA
recomputes tensors to fit (libtpu: "rematerialization limit = 95% hbm - arguments ..."), which costs step time;
it refuses a step when even that leaves it over the limit (RESOURCE_EXHAUSTED). In the data its recomputation
recovered at most 0.9 GiB on a step it then refused (nothing on llama3-8b at batch 13 on one v6e-64) and it refused
steps from 103 % of the limit, so MemoryEstimate.verdict refuses every estimate over the limit: only XLA's compile of
that exact step can accept one (`python -m preview.compile ...`, the refusal prints it; the trainer's
--no-memory-check then keeps the plan). Between "fits" (even the estimate's highest need is under the 95 % point)
and the limit a plan is accepted with a warning that names the compile.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import PlanError
from core.presets import ModelPreset

GIB = 1024**3
# The estimate's advice where it leaves the verdict open; a plan whose steps XLA has compiled drops it
# (infra/config/plan_rules.py check_xla_verdicts: the notes follow the compile that ran).
COMPILE_FIRST = "compile it before you pay"
ACTIVATION_BYTES = 2   # MaxText `dtype: bfloat16` activations
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# bf16 logits (MaxText logits_dot_in_fp32=False) kept for the backward pass; the fp32 cast (cast_logits_to_fp32),
# the softmax and its gradient are fused and write the gradient over them.
LOGIT_BYTES = 2
HEAD_BYTES = 6         # the output head gathered in bf16 + its whole gradient in fp32, per element
HIDDEN_BYTES = 6       # the head's input in bf16 + its gradient in fp32
LAYER_BYTES = 4        # a decoder layer's weights gathered in bf16 + its whole bf16 gradient, per parameter
LAYERS_IN_FLIGHT = 3   # this layer, the next one's prefetched weights, the previous one's gradient being reduced
# Across slices XLA's memory assignment of the same per-device step is larger when activations are offloaded to the
# host: offloaded tensors stay on device while their transfers queue behind the collectives over DCN. Measured with
# libtpu 0.0.50.1 (core/xla_calibration.json) against the same per-device step on one slice: llama3-70b 32-way FSDP
# at batch 2, FSDP across 2 slices, +4.3 GiB (7.7 layers of its offloaded input/q/k/v); llama3-8b 16-way at batch 3,
# data parallel across 2 slices, +6.65 GiB (10.1 layers of input/q/k/v/out); at batch 12 the same 8B step needs
# 47.8 GiB, which 5 layers reproduce (the count does not grow with the batch as the transfers do). Without offload
# (qwen3-0.6b, full remat) slices add nothing measurable. The one count in this model taken from the compiler's
# figures rather than from a buffer's shape: re-measure it when libtpu changes.
OFFLOADED_LAYERS_HELD_ACROSS_SLICES = 5
# A tied output head (logits computed with the embedding matrix, MaxText logits_via_embedding: qwen3) on one slice:
# XLA holds the logits at 4 bytes each, not 2. Measured with libtpu 0.0.50.1 (core/xla_calibration.json):
# qwen3-0.6b on 1 x v6e-8 needs 2.55 GiB more per sequence of 4096 tokens (batch 4: 12.2 GiB with the reservation;
# batch 12: refused, 31.48 GiB of temporaries), 4.0 bytes per logit plus the saved activations; the same step on
# 2 x v6e-8 needs 1.78 GiB more per sequence. The per-device shards are the same on one slice and two (data
# parallel across slices leaves FSDP at 8 ways in both; the layout adds no buffer), and the multislice
# LIBTPU_INIT_ARGS do not change it (the 1-slice step compiled with them: the same 11.33 GB program), so it is
# how XLA schedules the loss phase without a DCN axis, taken from the compiler's figures like the count above.
# Untied heads (llama3) on one slice keep 2 bytes per logit (llama3-8b on 1 x v6e-64 at batch 12: 30.45 GiB).
TIED_LOGIT_BYTES_ONE_SLICE = 4
# The eval step (MaxText 0.2.5 trainers/pre_train/train.py eval_step: loss_fn with is_train=False, no gradient, no
# new state) is forward only: the same train state (parameters and AdamW's moments are its arguments), no gradients,
# nothing saved for a backward pass, the head and the layers' weights gathered in bf16 without gradients, and the
# next layer's weights prefetched while this one computes. No calibration row fits these constants
# (core/xla_calibration.json compiles train steps); XLA's verdict on the eval step itself comes from compileCheck
# (aot/eval_compile.py compiles it as train.py does at start).
FORWARD_WEIGHT_BYTES = 2      # a gathered weight in bf16, per element (no gradient beside it)
FORWARD_LAYERS_IN_FLIGHT = 2  # this layer and the next one's prefetched weights

# Per device, libtpu 0.0.42.1 (the "hbm" section of core/xla_calibration.json, measured by
# `python -m preview.compile --calibrate` and compared with this table by tests/core/test_xla_calibration.py).
XLA_HBM_LIMIT_GIB = {"v4": 30.75, "v5e": 15.75, "v5p": 95.74, "v6e": 31.25, "tpu7x": 94.75}
RUNTIME_RESERVED_GIB = {"v4": 1.25, "v5e": 0.252, "v5p": 0.257, "v6e": 0.254, "tpu7x": 0.254}
# libtpu: "XLA::TPU post optimization rematerialization limit 29.63G = 95% hbm (29.68G) - (arguments ...)": above
# 95 % of the limit XLA recomputes tensors to fit (slower steps); it refuses a step only when even that does not
# bring it under the limit (RESOURCE_EXHAUSTED).
REMAT_THRESHOLD = 0.95
# The estimate's error margin (tests/core/test_xla_calibration.py derives it from core/xla_calibration.json and
# holds this to it): the largest |estimate / XLA's need - 1| of a fitted row compiled near the limit when it is
# left out (llama3-70b-1xv6e-256-b8-fp32, -9.1 %, which the other rows' 6 % would not cover), and of the four
# "margin" rows compiled after the terms were chosen (qwen3-0.6b-2xv6e-8-b20: XLA needs 36.98 GiB where the estimate
# says 30.26, -18.2 %), rounded up to a whole percent. It was 0.09 before those four rows and was raised to 0.19 in
# the change that added them: it is fitted to them, not measured on runs it was not fitted to. The
# compiles made after the model was frozen (preview/compile/calibration.py CALIBRATION_CASES held_out) measure it; docs/
# planner.md reports their error. What it decides: "fits" only when even estimate / (1 - error) is within XLA's
# 95 % recompute point; above that, up to XLA's limit, "near the limit" (a warning naming the compile). It never
# widens what is accepted: an estimate over XLA's limit is refused whatever the error (MemoryEstimate.verdict).
ESTIMATE_ERROR = 0.19
# The error measured where the held-out compiles found the estimate furthest off: a tied output head (qwen3) on
# more than one slice, where libtpu reshards the logits between slices and no term models it
# (qwen3-0.6b-2xv6e-8-b1-s32k: XLA needs 24.75 GiB where the estimate says 13.44, -45.7 %; the two-slice b20 margin
# row is the same direction, -18.2 %), rounded up. Such a step is called "fits" only when even estimate / (1 - this)
# is within XLA's recompute point; above, it is near the limit and compileCheck=auto lets XLA decide. It only moves
# steps from "fits" to "near the limit" (what is accepted is unchanged), and it is set from those two rows, so they
# no longer measure it (docs/planner.md).
TIED_HEAD_MULTISLICE_ERROR = 0.46

FITS, NEAR_LIMIT, DOES_NOT_FIT = "fits", "near the limit", "does not fit"

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
    error: float = ESTIMATE_ERROR    # the estimate's measured error for this kind of step

    @property
    def peak_phase(self) -> str:
        return "loss" if self.loss >= self.layer else "layer"

    @property
    def total(self) -> int:
        return (self.reserved + self.params + self.optimizer + self.gradients + self.activations
                + max(self.loss, self.layer))

    @property
    def recompute_point(self) -> int:
        """Above this XLA recomputes tensors to fit (95 % of its limit)."""
        return int(self.hbm * REMAT_THRESHOLD)

    @property
    def need_range(self) -> tuple[int, int]:
        """The bytes XLA may need for this step, given the estimate's measured error."""
        return int(self.total / (1 + self.error)), int(self.total / (1 - self.error))

    @property
    def verdict(self) -> str:
        """fits: even the highest need the error allows is within XLA's 95 % recompute point; near the limit:
        the estimate is within XLA's limit but the error reaches past that point (accepted, with a warning that
        names the compile); does not fit: the estimate is over XLA's limit. Over the limit only XLA's own compile
        of the step can accept it (the refusal names it; `memory_check=False` then keeps the plan): in the data,
        XLA's rematerialisation recovered at most 0.9 GiB on a step it refused, and refused steps from 103 % of the
        limit, so an estimate past the limit is not accepted on the strength of the error band."""
        if self.total > self.hbm:
            return DOES_NOT_FIT
        if self.need_range[1] <= self.recompute_point:
            return FITS
        return NEAR_LIMIT

    @property
    def fits(self) -> bool:
        """Accepted: fits outright, or near the limit (a warning naming the compile, not a refusal)."""
        return self.verdict != DOES_NOT_FIT

    @property
    def near_limit(self) -> bool:
        return self.verdict == NEAR_LIMIT

    @property
    def usable(self) -> int:
        """The largest estimate that is accepted: XLA's limit itself."""
        return self.hbm

    def terms(self) -> list[tuple[str, int]]:
        return [("reserved", self.reserved), ("params", self.params), ("optimizer", self.optimizer),
                ("gradients", self.gradients), ("activations", self.activations),
                (self.peak_phase, max(self.loss, self.layer))]

    def near_limit_warning(self) -> str | None:
        """What a plan near the limit risks, or None."""
        if not self.near_limit:
            return None
        low, high = self.need_range
        return (f"near the limit: the step may need {low / GIB:.1f}-{high / GIB:.1f} GiB per device (estimate "
                f"{self.total / GIB:.1f} +- {self.error:.0%}), past the {self.recompute_point / GIB:.2f} GiB where "
                f"XLA starts recomputing tensors (95 % of {self.hbm / GIB:.2f}): XLA may fit it only by recomputing "
                f"(slower steps) or refuse it; {COMPILE_FIRST}: --compile in the offline plan "
                "(python -m preview --stack NAME --compile) or python -m preview.compile")

    def describe(self) -> str:
        terms = " + ".join(f"{name} {value / GIB:.1f}" for name, value in self.terms())
        low, high = self.need_range
        where = f"on {self.generation}" if self.generation else "on this TPU"
        if self.verdict == FITS:
            tail = (f"fits: even {high / GIB:.1f} GiB (+{self.error:.0%} error) is within the "
                    f"{self.recompute_point / GIB:.2f} GiB where XLA starts recomputing (95 % of the "
                    f"{self.hbm / GIB:.2f} GiB XLA compiles against {where})")
        elif self.verdict == NEAR_LIMIT:
            tail = (f"near the limit: {low / GIB:.1f}-{high / GIB:.1f} GiB ({self.error:.0%} error) crosses "
                    f"the {self.recompute_point / GIB:.2f} GiB where XLA starts recomputing (95 % of the "
                    f"{self.hbm / GIB:.2f} GiB XLA compiles against {where}); {COMPILE_FIRST}")
        else:
            tail = f"does not fit: the estimate is over the {self.hbm / GIB:.2f} GiB XLA compiles against {where}"
        return f"{terms} = {self.total / GIB:.1f} GiB per device (estimated); {tail}"


def estimate(model: ModelPreset, *, fsdp: int, tensor: int, per_device_batch_size: float, seq_len: int,
             remat_policy: str, remat_offload: tuple[str, ...], weight_dtype: str, attention: str,
             generation: str, hbm_gib_per_device: float, num_vocab_tiling: int = 1,
             mu_dtype: str | None = None, slices: int = 1, forward_only: bool = False) -> MemoryEstimate:
    """Bytes per device. fsdp: FSDP shards (ICI x DCN); tensor: ICI tensor parallelism; slices: slices the step
    spans (collectives over DCN); forward_only: the eval step (see FORWARD_WEIGHT_BYTES) instead of the train
    step."""
    if weight_dtype not in DTYPE_BYTES:
        raise PlanError(f"weight_dtype={weight_dtype!r} unknown; allowed: {', '.join(DTYPE_BYTES)}")
    shards = fsdp * tensor
    weights = model.param_count * DTYPE_BYTES[weight_dtype] / shards
    tokens = per_device_batch_size * seq_len
    widths = _widths(model)
    saved = sum(widths[t] for t in saved_tensors(remat_policy, remat_offload))
    if mu_dtype not in (None, "") and mu_dtype not in DTYPE_BYTES:
        raise PlanError(f"mu_dtype={mu_dtype!r} unknown; allowed: {', '.join(DTYPE_BYTES)}")
    mu_bytes = DTYPE_BYTES[mu_dtype or weight_dtype]
    logit_bytes = TIED_LOGIT_BYTES_ONE_SLICE if model.tied_embeddings and slices == 1 else LOGIT_BYTES
    # Forward only: the head and its input without their gradients, two layers' weights without theirs. The
    # logits keep the train step's bytes (the tied head's 4 on one slice is XLA's measured layout of that phase).
    head_bytes, hidden_bytes = (FORWARD_WEIGHT_BYTES, ACTIVATION_BYTES) if forward_only else (HEAD_BYTES,
                                                                                                HIDDEN_BYTES)
    layers_bytes = (FORWARD_LAYERS_IN_FLIGHT * FORWARD_WEIGHT_BYTES if forward_only
                    else LAYERS_IN_FLIGHT * LAYER_BYTES)
    loss = (tokens / max(1, num_vocab_tiling) * model.vocab_size * logit_bytes
            + model.vocab_size * model.emb_dim * head_bytes / tensor
            + tokens * tensor * model.emb_dim * hidden_bytes)
    scores = (per_device_batch_size * model.num_query_heads * seq_len * seq_len * 4
              if attention == "dot_product" else 0)
    layer = (layers_bytes * model.params_per_layer / tensor
             + sum(widths.values()) * tokens * ACTIVATION_BYTES + scores)
    return MemoryEstimate(
        reserved=int(RUNTIME_RESERVED_GIB.get(generation, 0.25) * GIB),
        params=int(weights),
        optimizer=int(weights + model.param_count * mu_bytes / shards),   # nu in weight_dtype + mu
        gradients=0 if forward_only else int(model.param_count * DTYPE_BYTES[weight_dtype] / shards),
        # Nothing is kept for a backward pass in the eval step (the remat policy and offloads do not apply).
        activations=0 if forward_only else int(
            tokens * saved * model.num_layers * ACTIVATION_BYTES
            + (OFFLOADED_LAYERS_HELD_ACROSS_SLICES * tokens * ACTIVATION_BYTES
               * sum(widths[t] for t in offloaded_tensors(remat_policy, remat_offload))
               if slices > 1 else 0)),
        loss=int(loss),
        layer=int(layer),
        hbm=int(xla_hbm_limit_gib(generation, hbm_gib_per_device) * GIB),
        generation=generation,
        error=TIED_HEAD_MULTISLICE_ERROR if model.tied_embeddings and slices > 1 else ESTIMATE_ERROR,
    )
