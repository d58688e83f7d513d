"""Model presets: the architecture the planner sizes and the start-up check verifies, plus tuned defaults.

Architecture numbers are MaxText's own model configs (maxtext 0.2.5, `maxtext/configs/models/*.yml`);
they are repeated here because the planner must size a model without importing MaxText (the planner
runs on a laptop and inside Pulumi programs) and because the start-up check needs an independent
expectation to compare MaxText's loaded model against (docs/platform-notes.md §6: the seed silently trained the wrong model).

Training defaults follow the public tuned Trillium recipes where one exists:
AI-Hypercomputer/tpu-recipes, training/trillium/Llama3.1-8B-MaxText/v6e-16/README.md and
training/trillium/Llama3.1-70B-MaxText/v6e-32/README.md (workloads `llama3_1_8b_8192_no_collective_matmul`
and `llama3_1_70b_8192_bs2_bfloat16_no_collective_matmul`, MaxText tag tpu-recipes-v0.1.4). Both use full
FSDP inside the slice (`ici_fsdp_parallelism=-1`), 8192-token sequences, flash attention, and the `custom`
remat policy that offloads the decoder-layer input and the q/k/v (8B: also out) projections to host memory.
The seed runs used MaxText defaults instead (full remat, fp32 weights for 70B), which the planner still
accepts when asked explicitly, as long as they fit.

The rest of each recipe — its libtpu flags and MaxText kernel settings (splash-attention blocks, fused backward
kernel, iota embedding), with the commit each comes from and the flags left out — is data in core/recipes.py,
keyed by preset and TPU generation; tests/core/test_recipes.py keeps these defaults equal to the recipe's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from core.errors import PlanError


@dataclass(frozen=True)
class ModelPreset:
    name: str
    # MaxText `model_name`; "default" means MaxText's base config shaped by `dimension_overrides`.
    maxtext_model_name: str
    emb_dim: int
    num_query_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_dim: int
    num_layers: int
    vocab_size: int
    tied_embeddings: bool = False   # logits computed with the embedding matrix (no separate output head)
    qk_norm: bool = False           # per-head RMSNorm on q and k (Qwen3)
    # Tuned training defaults (see module docstring for sources).
    max_target_length: int = 8192
    per_device_batch_size: float = 1.0
    remat_policy: str = "full"
    # Tensors the `custom` remat policy moves to host memory; empty for the named policies.
    remat_offload: tuple[str, ...] = ()
    weight_dtype: str = "float32"
    attention: str = "flash"
    # Architecture keys passed to MaxText explicitly (only for models that are not a MaxText model_name).
    dimension_overrides: Mapping[str, str] = field(default_factory=dict)
    # The model runs on CPU (local mode) only; MaxText's `hardware=cpu`.
    cpu_only: bool = False
    source: str = ""

    @property
    def params_per_layer(self) -> int:
        attention = self.emb_dim * self.head_dim * (2 * self.num_query_heads + 2 * self.num_kv_heads)
        mlp = 3 * self.emb_dim * self.mlp_dim          # gated MLP: wi_0, wi_1, wo
        norms = 2 * self.emb_dim + (2 * self.head_dim if self.qk_norm else 0)
        return attention + mlp + norms

    @property
    def param_count(self) -> int:
        """Parameters MaxText should create for this architecture (embedding, layers, final norm, head)."""
        embedding = self.vocab_size * self.emb_dim
        head = 0 if self.tied_embeddings else self.vocab_size * self.emb_dim
        return embedding + self.num_layers * self.params_per_layer + self.emb_dim + head


# Offload sets from the tpu-recipes workloads named in the module docstring.
_LLAMA3_8B_OFFLOAD = ("decoder_layer_input", "out_proj", "query_proj", "key_proj", "value_proj")
_LLAMA3_70B_OFFLOAD = ("decoder_layer_input", "query_proj", "key_proj", "value_proj")

_TINY = ModelPreset(
    # MaxText's own CPU test model (docs/platform-notes.md §5), embedding widened 28 -> 32 so that 8- and 16-way FSDP
    # (one or two v6e 2x4 slices) divide it. Trains a step in well under a second on one core.
    name="tiny", maxtext_model_name="default",
    emb_dim=32, num_query_heads=4, num_kv_heads=4, head_dim=128, mlp_dim=32, num_layers=2,
    vocab_size=32,
    max_target_length=128, per_device_batch_size=1, attention="dot_product",
    dimension_overrides={
        "base_emb_dim": "32", "base_num_query_heads": "4", "base_num_kv_heads": "4",
        "base_mlp_dim": "32", "base_num_decoder_layers": "2", "head_dim": "128", "vocab_size": "32",
    },
    cpu_only=True,
    source="MaxText CPU test overrides",
)

# The same CPU test model with the vocabulary of a real tokenizer MaxText ships (the Llama 2 SentencePiece model,
# assets/tokenizers/tokenizer.llama2: 32,000 ids), so the local run can train on text it tokenizes itself
# (core/data.py). The embedding and output head are most of its 2.1M weights.
_TINY_TEXT = replace(_TINY, name="tiny-text", vocab_size=32000,
                     dimension_overrides={**_TINY.dimension_overrides, "vocab_size": "32000"},
                     source="MaxText CPU test overrides, Llama 2 vocabulary")

PRESETS: Mapping[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            name="llama3-8b", maxtext_model_name="llama3-8b",
            emb_dim=4096, num_query_heads=32, num_kv_heads=8, head_dim=128, mlp_dim=14336, num_layers=32,
            vocab_size=128256,
            per_device_batch_size=3, remat_policy="custom", remat_offload=_LLAMA3_8B_OFFLOAD,
            source="tpu-recipes trillium Llama3.1-8B-MaxText v6e-16 (core/recipes.py)",
        ),
        ModelPreset(
            name="llama3-70b", maxtext_model_name="llama3-70b",
            emb_dim=8192, num_query_heads=64, num_kv_heads=8, head_dim=128, mlp_dim=28672, num_layers=80,
            vocab_size=128256,
            # bf16 weights halve params, gradients and AdamW's moments (nu follows weight_dtype, mu follows it
            # unless mu_dtype is set): that is what lets 70B train on 32 v6e chips at all, near the limit
            # (tests/core/test_planner.py test_llama3_70b_fp32_weights_do_not_fit_on_32_chips; XLA fits the
            # recipe's batch 2 and batch 3 on one v6e-32, core/xla_calibration.json).
            per_device_batch_size=2, remat_policy="custom", remat_offload=_LLAMA3_70B_OFFLOAD,
            weight_dtype="bfloat16",
            source="tpu-recipes trillium Llama3.1-70B-MaxText v6e-32 (core/recipes.py)",
        ),
        ModelPreset(
            name="qwen3-0.6b", maxtext_model_name="qwen3-0.6b",
            emb_dim=1024, num_query_heads=16, num_kv_heads=8, head_dim=128, mlp_dim=3072, num_layers=28,
            vocab_size=151936, tied_embeddings=True, qk_norm=True,
            # No public Trillium recipe: MaxText defaults (full remat, fp32 weights) at a 4096 context.
            max_target_length=4096, per_device_batch_size=4,
            source="MaxText defaults (no tuned recipe published; core/recipes.py NO_RECIPE)",
        ),
        _TINY,
        _TINY_TEXT,
    )
}


def preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PlanError(f"unknown model {name!r}; known: {', '.join(PRESETS)}") from None
