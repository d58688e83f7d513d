"""First-order HBM estimate per JAX device for MaxText training of a dense decoder (pure arithmetic).

A device is a chip on every generation but TPU7x, whose two cores are two devices sharing the chip's HBM
(core/tpu_catalog.py, devices_per_chip); the caller passes the HBM of one device.
What is counted, per device:
- params, gradients and AdamW mu/nu: parameter count x bytes(weight_dtype), divided by the number of
  weight shards (fsdp over ICI and DCN x tensor). MaxText's mu inherits weight_dtype and optax's nu always
  does (maxtext base.yml, `mu_dtype`), so the optimizer is two more copies.
- saved activations: what the remat policy keeps on device between forward and backward, per layer.
  Per device this is per_device_batch x sequence x width whatever the tensor parallelism: tensor parallelism
  gives each device `tensor` times more sequences but 1/`tensor` of each sharded width.
- workspace: one layer recomputed in the backward pass (all its intermediates at once; their gradients
  replace them as the backward walks the layer), plus
  the [batch, heads, seq, seq] fp32 score matrix when attention is plain dot-product (flash never builds it).
- logits: [batch, seq, vocab] in fp32 for the loss; vocab is sharded over tensor, batch over the rest.
A fraction of HBM is kept back for XLA scratch space and fragmentation (USABLE_HBM_FRACTION).
This is an estimate to refuse what clearly cannot fit and to pick a batch; the compiler has the last word.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import PlanError
from core.presets import ModelPreset

GIB = 1024**3
USABLE_HBM_FRACTION = 0.9
ACTIVATION_BYTES = 2   # MaxText `dtype: bfloat16` activations
LOGIT_BYTES = 4        # the cross-entropy runs in fp32
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}

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


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int
    logits: int
    hbm: int

    @property
    def total(self) -> int:
        return self.params + self.gradients + self.optimizer + self.activations + self.workspace + self.logits

    @property
    def usable(self) -> int:
        return int(self.hbm * USABLE_HBM_FRACTION)

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def describe(self) -> str:
        parts = ("params", "gradients", "optimizer", "activations", "workspace", "logits")
        terms = " + ".join(f"{name} {getattr(self, name) / GIB:.1f}" for name in parts)
        relation = "<=" if self.fits else ">"
        return (f"{terms} = {self.total / GIB:.1f} GiB per device {relation} {self.usable / GIB:.1f} GiB usable "
                f"({USABLE_HBM_FRACTION:.0%} of {self.hbm / GIB:.0f} GiB HBM)")


def estimate(model: ModelPreset, *, weight_shards: int, per_device_batch_size: float, seq_len: int,
             remat_policy: str, remat_offload: tuple[str, ...], weight_dtype: str, attention: str,
             hbm_gib_per_device: float) -> MemoryEstimate:
    if weight_dtype not in DTYPE_BYTES:
        raise PlanError(f"weight_dtype={weight_dtype!r} unknown; allowed: {', '.join(DTYPE_BYTES)}")
    weights = model.param_count * DTYPE_BYTES[weight_dtype] / weight_shards
    tokens = per_device_batch_size * seq_len
    widths = _widths(model)
    saved = sum(widths[t] for t in saved_tensors(remat_policy, remat_offload))
    activations = tokens * saved * model.num_layers * ACTIVATION_BYTES
    one_layer = sum(widths.values()) * tokens * ACTIVATION_BYTES
    scores = (per_device_batch_size * model.num_query_heads * seq_len * seq_len * 4
              if attention == "dot_product" else 0)
    return MemoryEstimate(
        params=int(weights),
        gradients=int(weights),
        optimizer=int(2 * weights),
        activations=int(activations),
        workspace=int(one_layer + scores),
        logits=int(tokens * model.vocab_size * LOGIT_BYTES),
        hbm=int(hbm_gib_per_device * GIB),
    )
