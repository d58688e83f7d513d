"""Presets and planner: table tests, including the seed's two runs and the 70B-on-one-slice refusal."""
import pytest

from core.errors import PlanError
from core.memory import GIB, estimate, saved_tensors
from core.planner import PlanRequest, plan
from core.presets import PRESETS, preset


@pytest.mark.parametrize("name, billions", [
    # Published sizes: Llama 3 8B = 8.03B, Llama 3 70B = 70.55B, Qwen3-0.6B = 0.596B (tied embeddings).
    ("llama3-8b", 8.030), ("llama3-70b", 70.554), ("qwen3-0.6b", 0.596),
])
def test_preset_parameter_counts_match_published_sizes(name, billions):
    assert preset(name).param_count / 1e9 == pytest.approx(billions, abs=0.001)


def test_every_preset_names_a_source_and_a_known_maxtext_model():
    for p in PRESETS.values():
        assert p.source
        assert p.maxtext_model_name == "default" or p.maxtext_model_name == p.name


def test_seed_run_llama3_8b_fsdp4_tensor4_on_two_v6e_16_is_accepted():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, ici_fsdp=4, ici_tensor=4))
    assert (p.ici_fsdp, p.ici_tensor, p.dcn_data, p.dcn_fsdp) == (4, 4, 2, 1)
    assert p.ici_fsdp * p.ici_tensor == p.shape.chips == 16
    assert p.dcn_data * p.dcn_fsdp == p.slices == 2
    assert p.memory.fits
    # The seed's own (untuned) settings: full remat, batch 4 x 4096 tokens per chip (docs/platform-notes.md §6).
    seed = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, ici_fsdp=4, ici_tensor=4,
                            remat_policy="full", per_device_batch_size=4, max_target_length=4096))
    assert seed.memory.fits and seed.remat_offload == ()


def test_seed_run_llama3_70b_dcn_fsdp2_full_remat_on_two_v6e_16_is_accepted():
    p = plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, dcn_fsdp=2, remat_policy="full",
                         max_target_length=4096))
    assert (p.dcn_data, p.dcn_fsdp, p.ici_fsdp) == (1, 2, 16)
    assert p.remat_policy == "full" and p.remat_offload == ()
    assert p.weight_dtype == "bfloat16"          # tuned recipe (v6e-32), not MaxText's fp32 default
    assert p.per_device_batch_size == 1          # lowered from the tuned 2 so full remat fits
    assert p.notes and "lowered" in p.notes[0]


def test_llama3_70b_on_one_v6e_16_is_refused_with_numbers():
    with pytest.raises(PlanError) as err:
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=1))
    message = str(err.value)
    assert "\n" not in message
    assert "1 x v6e-16" in message and "GiB per device >" in message and "params 8.2" in message


def test_llama3_70b_elastic_down_to_one_slice_is_refused_but_fixed_two_slices_fit():
    assert plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2)).dcn_fsdp == 2
    with pytest.raises(PlanError, match=r"1 x v6e-16 \(elastic minimum of 1..2 slices\)"):
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, min_slices=1))


def test_llama3_70b_fp32_weights_do_not_fit_on_32_chips():
    with pytest.raises(PlanError, match="weights float32"):
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, weight_dtype="float32"))


def test_defaults_follow_the_tuned_trillium_recipe():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    assert (p.ici_fsdp, p.ici_tensor) == (16, 1)             # ici_fsdp_parallelism=-1 in the recipe
    assert (p.dcn_data, p.dcn_fsdp) == (2, 1)                # data parallel across slices when it fits
    assert p.per_device_batch_size == 3 and p.max_target_length == 8192 and p.attention == "flash"
    assert p.remat_policy == "custom" and "decoder_layer_input" in p.remat_offload
    keys = p.overrides()
    assert keys["decoder_layer_input"] == "offload" and keys["remat_policy"] == "custom"
    assert "-1" not in keys.values()                         # MaxText must not pick the mesh itself


@pytest.mark.parametrize("request_, pattern", [
    (PlanRequest("gpt-5"), r"unknown model 'gpt-5'"),
    (PlanRequest("llama3-8b", "v6e", "3x3"), r"topology '3x3' unknown for v6e"),
    (PlanRequest("llama3-8b", "v9", "4x4"), r"generation 'v9' unknown"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, ici_fsdp=4, ici_tensor=2), r"ici_fsdp_parallelism=4 x ici_tensor_parallelism=2 = 8, but devices per v6e-16 slice = 16"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, ici_tensor=3), r"ici_tensor_parallelism=3 does not divide devices"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 4, dcn_data=3), r"dcn_data_parallelism=3 does not divide slices = 4"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, dcn_data=2, dcn_fsdp=2), r"= 4, but slices = 2"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, min_slices=3), r"elastic bounds 3,2"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=0.5, ici_tensor=1), r"global batch 16 .* does not divide over 32"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=0.3), r"not a whole number"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=16), r"does not fit"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, remat_policy="fastest"), r"remat_policy='fastest' unknown"),
    (PlanRequest("tiny", "v6e", "8x8", 1), r"64 ways does not divide tiny's embedding dimension 32"),
    (PlanRequest("qwen3-0.6b", "v6e", "2x4", 1, ici_fsdp=1, ici_tensor=8), None),   # 16 heads / 8: fine
])
def test_bad_requests_are_refused_with_the_values(request_, pattern):
    if pattern is None:
        assert plan(request_).ici_tensor == 8
        return
    with pytest.raises(PlanError, match=pattern):
        plan(request_)


def test_elastic_plan_resizes_its_one_dcn_axis():
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1))
    assert p.elastic and (p.min_workers, p.workers) == (4, 8)
    one = p.at_slices(1)
    assert (one.dcn_data, one.dcn_fsdp, one.devices) == (1, 1, 16)
    with pytest.raises(PlanError, match="one DCN axis"):
        plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=4, min_slices=2, dcn_data=2, dcn_fsdp=2))


def test_memory_estimate_terms():
    m = preset("llama3-8b")
    full = estimate(m, weight_shards=16, per_device_batch_size=1, seq_len=4096, remat_policy="full",
                    remat_offload=(), weight_dtype="float32", attention="flash", hbm_gib_per_device=32)
    assert full.params == full.gradients == full.optimizer // 2 == m.param_count * 4 // 16
    assert full.activations == 4096 * m.emb_dim * m.num_layers * 2          # only the layer inputs
    offloaded = estimate(m, weight_shards=16, per_device_batch_size=1, seq_len=4096, remat_policy="custom",
                         remat_offload=("decoder_layer_input",), weight_dtype="float32", attention="flash",
                         hbm_gib_per_device=32)
    assert offloaded.activations == 0
    dot = estimate(m, weight_shards=16, per_device_batch_size=1, seq_len=4096, remat_policy="full",
                   remat_offload=(), weight_dtype="float32", attention="dot_product", hbm_gib_per_device=32)
    assert dot.workspace - full.workspace == m.num_query_heads * 4096 * 4096 * 4
    assert full.hbm == 32 * GIB and full.usable < full.hbm
    assert saved_tensors("minimal", ()) > saved_tensors("save_qkv_proj", ()) > saved_tensors("full", ())


def test_tpu7x_mesh_spans_two_devices_per_chip():
    """TPU7x exposes two JAX devices per chip (MaxText src/maxtext/utils/accelerator_to_spec_map.py @e591f30c:
    "tpu7x: two cores per chip"), so the ICI mesh of a 2x2x2 slice (8 chips) has 16 devices, the global batch
    counts 16 devices per slice, and each device has half of the chip's 192 GiB of HBM."""
    p = plan(PlanRequest("llama3-8b", "tpu7x", "2x2x2", slices=2))
    assert p.shape.chips == 8
    assert p.ici_fsdp * p.ici_tensor == 2 * p.shape.chips == 16
    assert p.devices == 2 * 2 * p.shape.chips
    assert p.global_batch_size == p.per_device_batch_size * 32
    assert p.memory.hbm == 96 * GIB
    with pytest.raises(PlanError, match="16"):
        plan(PlanRequest("llama3-8b", "tpu7x", "2x2x2", slices=2, ici_fsdp=8, ici_tensor=1))


def test_one_device_per_chip_elsewhere():
    """v4/v5p run megacore (one JAX device per chip; MaxText accelerator_to_spec_map.py @e591f30c, v5p-16 = 8
    devices on 8 chips), v5e/v6e have one core per chip."""
    for generation, topology in (("v6e", "4x4"), ("v5p", "2x2x2"), ("v4", "2x2x2")):
        p = plan(PlanRequest("qwen3-0.6b", generation, topology, slices=1))
        assert p.ici_fsdp * p.ici_tensor == p.shape.chips == p.devices
