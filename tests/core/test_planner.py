"""Presets and planner: table tests, including the seed's two runs (8B accepted, 70B as written refused), the
70B-on-one-slice refusal, elastic ranges checked at every slice count and the batch search."""
import dataclasses

import pytest

from core.errors import PlanError
from core.memory import ESTIMATE_ERROR, GIB, estimate, saved_tensors
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
    # The seed's own (untuned) settings: full remat, batch 4 x 4096 tokens per chip (docs/platform-notes.md §6);
    # XLA compiles it (core/xla_calibration.json row llama3-8b-2xv6e-16-tp4-b4).
    seed = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2, ici_fsdp=4, ici_tensor=4,
                            remat_policy="full", per_device_batch_size=4, max_target_length=4096))
    assert seed.memory.fits and seed.remat_offload == ()


SEED_70B = PlanRequest("llama3-70b", "v6e", "4x4", slices=2, dcn_fsdp=2, remat_policy="full", max_target_length=4096,
                       weight_dtype="float32", per_device_batch_size=1)


def test_seed_run_llama3_70b_as_written_is_refused_and_says_why():
    """The seed's 70B run (dcn_fsdp 2, full remat, MaxText's default fp32 weights, batch 1 x 4096) does not compile:
    XLA needs 44 GiB per device of 31.25 (core/xla_calibration.json row llama3-70b-2xv6e-16-seed-fp32). fp32
    weights, gradients and Adam state alone are 16 bytes x 70.6B / 32 devices = 32.9 GiB; libtpu 0.0.50.1 agrees."""
    with pytest.raises(PlanError) as err:
        plan(SEED_70B)
    message = str(err.value)
    assert "\n" not in message
    assert "does not fit on 2 x v6e-16" in message and "weights float32" in message
    assert "params 8.2 + optimizer 16.4 + gradients 8.2" in message
    assert "(estimated); does not fit: the estimate is over the 31.25 GiB XLA compiles against on v6e" in message
    assert "only a compile of this exact step that fits accepts it" in message
    # The refusal names the command that asks XLA instead, for exactly this plan.
    assert ("python -m preview.compile --model llama3-70b --generation v6e --topology 4x4 --slices 2 --dcn-data 1 "
            "--dcn-fsdp 2 --ici-tensor 1 --per-device-batch-size 1 --max-target-length 4096 --remat-policy full "
            "--weight-dtype float32 --no-memory-check") in message
    # With the memory check off the same request plans (that is what the compile runs), with a note.
    kept = plan(dataclasses.replace(SEED_70B, memory_check=False))
    assert not kept.memory.fits and "memory check off" in kept.notes[0]


def test_llama3_70b_on_one_v6e_16_is_refused_with_numbers():
    with pytest.raises(PlanError) as err:
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=1))
    message = str(err.value)
    assert "\n" not in message
    assert "1 x v6e-16" in message and "GiB per device (estimated); does not fit" in message and "params 8.2" in message


def test_llama3_70b_elastic_down_to_one_slice_is_refused():
    with pytest.raises(PlanError, match=r"1 x v6e-16 \(elastic: at 1 of 1..2 slices\)"):
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, min_slices=1))


def test_elastic_plans_are_checked_at_every_slice_count_not_only_the_ends():
    """70B with FSDP across 2..4 slices of 16 chips: at 3 slices FSDP is 48-way, which does not divide the 8192-wide
    embedding (MaxText shards every weight's embed axis over FSDP); the ends (32- and 64-way) do."""
    with pytest.raises(PlanError) as err:
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=4, min_slices=2, dcn_fsdp=4))
    assert "48 ways does not divide llama3-70b's embedding dimension 8192 (at 3 slices" in str(err.value)
    with pytest.raises(PlanError, match="48 ways"):        # left to choose, the planner says why FSDP was not tried
        plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=4, min_slices=2))
    # The batch must lay out at every count too: 0.5 per device needs an even number of devices per tensor group.
    p = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=3, min_slices=1))
    assert all(p.at_slices(n).memory.fits for n in (1, 2, 3))


def test_elastic_plan_says_what_happens_to_the_global_batch():
    p = plan(PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, min_slices=1))
    assert p.per_device_batch_size == p.at_slices(1).per_device_batch_size
    assert p.at_slices(1).global_batch_size * 2 == p.global_batch_size
    note = next(n for n in p.notes if n.startswith("elastic"))
    assert "32 sequences per step on 1 slice(s) .. 64 on 2" in note and "learning-rate schedule" in note


def test_batch_search_tries_every_batch_that_lays_out():
    from core.planner import _batch_candidates
    shape = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2)).shape
    assert _batch_candidates(3, shape, range(2, 3), 1) == [3, 2, 1]               # not 3, 1.5 (no layout) and stop
    assert _batch_candidates(2, shape, range(2, 3), 4) == [2, 1.75, 1.5, 1.25, 1, 0.75, 0.5, 0.25]
    assert _batch_candidates(2.5, shape, range(1, 3), 2) == [2.5, 2, 1.5, 1, 0.5]


@pytest.mark.parametrize("request_, batch, tuned", [
    # A halving search (3 -> 1.5, which does not lay out, and stop; 4 -> 2) would miss these.
    (PlanRequest("llama3-8b", "v5e", "8x8", slices=1, remat_policy="full"), 2, 3),
    (PlanRequest("qwen3-0.6b", "v5e", "2x4", slices=2, remat_policy="minimal"), 3, 4),
])
def test_batch_between_halvings_is_found(request_, batch, tuned):
    p = plan(request_)
    assert p.per_device_batch_size == batch
    assert any(f"lowered from {tuned} to {batch}" in note for note in p.notes)


def test_the_published_8b_v6e_8_batch_is_kept():
    """Google's Llama3.1-8B v6e-8 recipe runs batch 3 (core/recipes.py PUBLISHED_RUNS); XLA needs 22.3 GiB
    (core/xla_calibration.json llama3-8b-1xv6e-8-b3): the planner keeps the tuned batch."""
    assert plan(PlanRequest("llama3-8b", "v6e", "2x4", slices=1)).per_device_batch_size == 3


def test_tensor_parallelism_must_divide_heads_kv_heads_mlp_and_vocabulary():
    from core.planner import _tensor_problem
    qwen = preset("qwen3-0.6b")
    assert _tensor_problem(qwen, 8) is None
    assert "8 KV heads" in _tensor_problem(qwen, 16)
    assert "16 attention heads" in _tensor_problem(qwen, 32)
    assert "3001 MLP width" in _tensor_problem(dataclasses.replace(qwen, mlp_dim=3001), 2)
    assert "151937 vocabulary" in _tensor_problem(dataclasses.replace(qwen, vocab_size=151937), 2)
    with pytest.raises(PlanError, match="does not divide qwen3-0.6b's 8 KV heads"):
        plan(PlanRequest("qwen3-0.6b", "v6e", "4x4", 1, ici_fsdp=1, ici_tensor=16))


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
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, ici_fsdp=1, ici_tensor=16), r"does not divide llama3-8b's 8 KV heads"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=0.5, ici_tensor=1), r"global batch 16 .* does not divide over 32"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=0.3), r"not a whole number"),
    (PlanRequest("llama3-8b", "v6e", "4x4", 2, per_device_batch_size=16), r"does not fit.*\(estimated\)"),
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


def _estimate(model="llama3-8b", **kw):
    args = dict(fsdp=16, tensor=1, per_device_batch_size=1, seq_len=4096, remat_policy="full", remat_offload=(),
                weight_dtype="float32", attention="flash", generation="v6e", hbm_gib_per_device=32)
    args.update(kw)
    return estimate(preset(model), **args)


def test_memory_estimate_terms():
    m = preset("llama3-8b")
    full = _estimate()
    assert full.params == full.optimizer // 2 == m.param_count * 4 // 16       # fp32 weights, mu, nu
    assert full.gradients == m.param_count * 4 // 16                           # in the weights' dtype
    assert _estimate(weight_dtype="bfloat16").gradients == m.param_count * 2 // 16
    assert full.activations == 4096 * m.emb_dim * m.num_layers * 2          # only the layer inputs, bf16
    assert _estimate(remat_policy="custom", remat_offload=("decoder_layer_input",)).activations == 0
    # The loss phase: bf16 logits (their gradient written over them), the output head gathered in bf16 with its
    # whole fp32 gradient, and the head's input (bf16) + its gradient (fp32).
    assert full.loss == 4096 * m.vocab_size * 2 + m.vocab_size * m.emb_dim * 6 + 4096 * m.emb_dim * 6
    # num_vocab_tiling computes the loss over chunks of the tokens: only the logits shrink.
    tiled = _estimate(num_vocab_tiling=4)
    assert full.loss - tiled.loss == 4096 * m.vocab_size * 2 * 3 // 4
    # The layer phase: three layers' weights gathered + their whole gradients (bf16), one set of intermediates.
    widths = m.emb_dim * 3 + m.head_dim * (m.num_query_heads + 2 * m.num_kv_heads) + 2 * m.mlp_dim
    assert full.layer == 3 * m.params_per_layer * 4 + widths * 4096 * 2
    # Across slices, host-offloaded activations of 5 layers stay on device (measured; core/memory.py).
    offloaded = dict(remat_policy="custom", remat_offload=("decoder_layer_input", "query_proj"))
    assert (_estimate(slices=2, **offloaded).activations - _estimate(**offloaded).activations
            == 5 * 4096 * (m.emb_dim + m.num_query_heads * m.head_dim) * 2)
    assert _estimate(slices=2).activations == full.activations                  # nothing offloaded
    assert full.total == (full.reserved + full.params + full.optimizer + full.gradients + full.activations
                          + max(full.loss, full.layer))
    # Plain dot-product attention builds fp32 scores in the layer phase (here larger than the loss phase).
    dot = _estimate(attention="dot_product", seq_len=8192)
    assert dot.layer - _estimate(seq_len=8192).layer == m.num_query_heads * 8192 * 8192 * 4
    assert dot.peak_phase == "layer" and full.peak_phase == "loss"
    # Tensor parallelism shards weights, the head and the layer, not the per-device tokens. The head's input is
    # gathered over tensor: 4 times the sequences, whole width.
    tp = _estimate(fsdp=4, tensor=4)
    assert tp.params == full.params and tp.activations == full.activations
    assert tp.loss == 4096 * m.vocab_size * 2 + m.vocab_size * m.emb_dim * 6 // 4 + 4 * 4096 * m.emb_dim * 6
    assert _estimate(weight_dtype="bfloat16").params * 2 == full.params
    # bfloat16 first moments: nu stays in the weights' dtype.
    assert _estimate(mu_dtype="bfloat16").optimizer == full.params + full.params // 2
    # A tied embedding (Qwen3): the head is the embedding, one matrix either way.
    qwen = preset("qwen3-0.6b")
    assert _estimate("qwen3-0.6b", slices=2).loss == (4096 * qwen.vocab_size * 2 + qwen.vocab_size * qwen.emb_dim * 6
                                                      + 4096 * qwen.emb_dim * 6)
    # ... whose logits XLA holds at 4 bytes each on one slice (measured: core/memory.py TIED_LOGIT_BYTES_ONE_SLICE);
    # an untied head's stay at 2 on one slice too.
    assert _estimate("qwen3-0.6b").loss - _estimate("qwen3-0.6b", slices=2).loss == 4096 * qwen.vocab_size * 2
    assert _estimate(slices=2).loss == full.loss
    # The limit is what XLA compiles against (31.25 GiB on v6e); the verdict applies the estimate's error once.
    assert full.hbm == int(31.25 * GIB) and full.usable == full.hbm
    assert _estimate(generation="v5e", hbm_gib_per_device=16).hbm == int(15.75 * GIB)
    assert saved_tensors("minimal", ()) > saved_tensors("save_qkv_proj", ()) > saved_tensors("full", ())


def test_verdict_bands_use_the_one_margin():
    """fits: even the estimate's highest need is within XLA's 95 % recompute point; near the limit: it may cross
    it, and the estimate is within XLA's limit (accepted, with a warning naming the compile); does not fit: the
    estimate is over XLA's limit, whatever the error (XLA refused steps from 103 % of its limit and recovered at
    most 0.9 GiB by recomputing on a refused row, core/xla_calibration.json)."""
    from core.memory import DOES_NOT_FIT, FITS, NEAR_LIMIT
    base = _estimate()
    limit = base.hbm

    def at(total_gib_share: float) -> str:
        extra = int(total_gib_share * limit) - base.total
        return dataclasses.replace(base, reserved=base.reserved + extra).verdict

    assert at(0.95 * (1 - ESTIMATE_ERROR) - 0.001) == FITS
    assert at(0.95 * (1 - ESTIMATE_ERROR) + 0.001) == NEAR_LIMIT
    assert at(1 - 0.0001) == NEAR_LIMIT
    assert at(1 + 0.0001) == DOES_NOT_FIT
    warning = dataclasses.replace(base, reserved=base.reserved + int(0.99 * limit) - base.total).near_limit_warning()
    assert "near the limit" in warning and "--compile" in warning and "python -m preview.compile" in warning


def test_tpu7x_mesh_spans_two_devices_per_chip():
    """TPU7x exposes two JAX devices per chip (MaxText src/maxtext/utils/accelerator_to_spec_map.py @e591f30c:
    "tpu7x: two cores per chip"), so the ICI mesh of a 2x2x2 slice (8 chips) has 16 devices, the global batch
    counts 16 devices per slice, and each device has half of the chip's 192 GiB of HBM, of which XLA compiles
    against 94.75 GiB (core/xla_calibration.json, "hbm")."""
    p = plan(PlanRequest("llama3-8b", "tpu7x", "2x2x2", slices=2))
    assert p.shape.chips == 8
    assert p.ici_fsdp * p.ici_tensor == 2 * p.shape.chips == 16
    assert p.devices == 2 * 2 * p.shape.chips
    assert p.global_batch_size == p.per_device_batch_size * 32
    assert p.memory.hbm == int(94.75 * GIB) and p.memory.hbm < 96 * GIB
    with pytest.raises(PlanError, match="16"):
        plan(PlanRequest("llama3-8b", "tpu7x", "2x2x2", slices=2, ici_fsdp=8, ici_tensor=1))


def test_one_device_per_chip_elsewhere():
    """v4/v5p run megacore (one JAX device per chip; MaxText accelerator_to_spec_map.py @e591f30c, v5p-16 = 8
    devices on 8 chips), v5e/v6e have one core per chip."""
    for generation, topology in (("v6e", "4x4"), ("v5p", "2x2x2"), ("v4", "2x2x2")):
        p = plan(PlanRequest("qwen3-0.6b", generation, topology, slices=1))
        assert p.ici_fsdp * p.ici_tensor == p.shape.chips == p.devices


# --- advice: the best shape of a run that fits, the nearest that fits for one that does not ----------------------

def test_advice_for_a_run_that_fits_is_the_largest_batch_that_still_fits():
    from core.nearest_fits import advise
    advice = advise(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    assert advice.fits and advice.refusal is None and not advice.alternatives
    best = advice.largest_batch
    assert best >= advice.plan.per_device_batch_size
    # Everything else as planned (data parallel across the two slices); one more sequence per device is refused.
    same = dict(slices=2, dcn_data=2, dcn_fsdp=1)
    assert plan(PlanRequest("llama3-8b", "v6e", "4x4", per_device_batch_size=best, **same)).memory.fits
    with pytest.raises(PlanError, match="does not fit"):
        plan(PlanRequest("llama3-8b", "v6e", "4x4", per_device_batch_size=best + 1, **same))


def test_advice_for_a_run_that_does_not_fit_names_the_nearest_that_does():
    from core.nearest_fits import advise
    advice = advise(SEED_70B)
    assert not advice.fits and "does not fit" in advice.refusal
    assert advice.alternatives
    for alt in advice.alternatives:
        assert plan(alt.request).memory.fits                      # each one plans as given
        assert 1 <= len(alt.kinds) <= 2 and alt.change
    chips = [alt.extra_chips for alt in advice.alternatives]
    assert chips == sorted(chips)                                 # no more chips before more chips
    assert advice.alternatives[0].extra_chips == 0                # the seed's run fits on its own 32 chips


def test_advice_adds_slices_only_when_nothing_else_fits():
    from core.nearest_fits import advise
    advice = advise(PlanRequest("llama3-70b", "v6e", "4x4", slices=1))
    assert not advice.fits
    first = advice.alternatives[0]
    assert "slices" in first.kinds and first.extra_chips > 0 and first.plan.memory.fits


def test_advice_has_no_alternatives_for_input_errors():
    from core.nearest_fits import advise
    advice = advise(PlanRequest("llama3-8b", "v6e", "3x3"))
    assert not advice.fits and "unknown" in advice.refusal and advice.alternatives == ()


# --- what the recipes use beyond mesh, batch, remat and dtype ---------------------------------------------------

def test_maxtext_keys_that_change_memory_are_estimated_or_named_never_refused():
    """MaxText 0.2.5 base.yml has each key: ici_context_parallelism (the `embed` axis of every weight is sharded
    over fsdp and context: logical_axis_rules), num_vocab_tiling (maxtext/utils/vocabulary_tiling.py: the loss in
    chunks of the tokens), mu_dtype (AdamW's first moment; "Inherits from weight_dtype if unset"), quantization
    (fp8 among QuantizationType in maxtext/configs/types.py)."""
    from core.maxtext_memory_keys import with_maxtext_keys
    base = PlanRequest("llama3-8b", "v6e", "4x4", slices=2)
    request, rest = with_maxtext_keys(base, {"num_vocab_tiling": "4", "mu_dtype": "bfloat16",
                                             "ici_context_parallelism": "2", "quantization": "fp8",
                                             "log_period": "10"})
    assert rest == {"quantization": "fp8", "log_period": "10"}          # left for the run, as set
    tiled, plain = plan(request), plan(base)
    keys = tiled.overrides()
    assert (keys["num_vocab_tiling"], keys["mu_dtype"], keys["ici_context_parallelism"]) == ("4", "bfloat16", "2")
    assert tiled.ici_fsdp * tiled.ici_context == 16 and keys["ici_fsdp_parallelism"] == "8"
    # Estimated: a quarter of the logits live at once, mu in 2 bytes instead of 4; context ways shard weights too.
    assert tiled.memory.loss < plain.memory.loss
    assert tiled.memory.optimizer == plain.memory.params + plain.memory.params // 2
    # Not estimated: named in the notes with the command that decides, not refused.
    assert any("does not cover quantization=fp8" in note and "preview.compile" in note for note in tiled.notes)
    assert "num_vocab_tiling" not in plain.overrides() and "mu_dtype" not in plain.overrides()


def test_context_parallelism_must_divide_the_slice():
    with pytest.raises(PlanError, match="ici_context_parallelism=3 must be >= 1 and divide the 16 devices"):
        plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=1, ici_context=3))


def test_the_request_for_a_plan_plans_it_again_with_the_maxtext_keys_it_was_planned_with():
    """core/advice.py re-plans a chosen run one change at a time from request_for: dropping the MaxText keys a run
    was planned with (context parallelism, vocabulary tiling, mu_dtype, keys not estimated) would advise another
    run than the one that failed."""
    from core.nearest_fits import request_for

    request = PlanRequest("llama3-8b", "v6e", "4x4", slices=2, min_slices=1, ici_context=2, num_vocab_tiling=4,
                          mu_dtype="bfloat16", unmodeled=(("quantization", "fp8"),))
    chosen = plan(request)
    again = plan(request_for(chosen))
    assert again == chosen
    assert (again.ici_context, again.num_vocab_tiling, again.mu_dtype, again.unmodeled, again.min_slices) == (
        2, 4, "bfloat16", (("quantization", "fp8"),), 1)


def _scan(chosen, allowed, ceiling=64.0):
    """The separate upward scan per bound the planner used to run (the oracle for its single scan)."""
    import dataclasses

    from core.planner import _check_batch, _estimate, _host_problem

    step, best = 1 / chosen.ici_batch_free, chosen.per_device_batch_size
    counts = range(chosen.min_slices, chosen.slices + 1)
    k = int(round(best / step)) + 1
    while k * step <= ceiling:
        candidate = k * step
        if all(_check_batch(candidate, chosen.shape, n, chosen.ici_batch_free) is None for n in counts):
            trial = dataclasses.replace(chosen, per_device_batch_size=candidate)
            trial = dataclasses.replace(trial, memory=_estimate(trial))
            if not all(p.memory.verdict in allowed and _host_problem(p) is None
                       for p in (trial.at_slices(n) for n in counts)):
                break
            best = candidate
        k += 1
    return best


def test_one_scan_gives_both_batch_bounds_the_two_scans_gave():
    from core.memory import FITS, NEAR_LIMIT
    from core.planner import batch_bounds

    for request in (PlanRequest("llama3-8b", "v6e", "4x4", slices=2),
                    PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, min_slices=1),
                    PlanRequest("llama3-8b", "v6e", "8x8", slices=1),
                    PlanRequest("llama3-70b", "v6e", "4x8", slices=2)):
        chosen = plan(request)
        assert batch_bounds(chosen) == (_scan(chosen, (FITS,)), _scan(chosen, (FITS, NEAR_LIMIT)))


def test_advice_answers_from_the_plans_own_batch_scan(monkeypatch):
    """advise() plans once and reads the largest batch from the scan the plan's notes were written from: one
    scan per advice, the same answer as scanning the plan again."""
    import core.nearest_fits as nearest_fits
    import core.planner as planner

    request = PlanRequest("llama3-8b", "v6e", "4x4", slices=2)
    expected = planner.largest_batch(plan(request))
    scans = []
    real = planner.batch_bounds
    monkeypatch.setattr(planner, "batch_bounds", lambda chosen, *a, **k: scans.append(chosen) or real(chosen, *a, **k))
    advice = nearest_fits.advise(request)
    assert len(scans) == 1 and advice.largest_batch == expected
    # A plan kept over the limit (memory check off) has no scan in its notes: advice scans it once.
    over = PlanRequest("llama3-70b", "v6e", "2x4", slices=1, per_device_batch_size=4, memory_check=False)
    scans.clear()
    kept = nearest_fits.advise(over)
    assert len(scans) == 1 and kept.largest_batch == kept.plan.per_device_batch_size


def test_a_run_with_an_eval_split_plans_its_eval_step_at_every_slice_count():
    """The eval step (MaxText 0.2.5 trainers/pre_train/train.py eval_step: loss_fn with is_train=False, no gradient)
    runs at eval_per_device_batch_size, per_device_batch_size when unset (configs/types.py). It holds the train
    state but no gradients and nothing saved for a backward pass; the plan's verdict is the worse of the two steps
    at every slice count; MaxText's train_compile compiles only train.train_step, so the plan says compileCheck
    compiles the eval step itself (aot/eval_compile.py)."""
    from core.maxtext_memory_keys import with_maxtext_keys
    from core.planner import DoesNotFit

    request = PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, min_slices=1, per_device_batch_size=8,
                          evaluates=True)
    chosen = plan(request)
    for count in (1, 2):
        resized = chosen.at_slices(count)
        evaluated = resized.eval_memory
        assert evaluated.gradients == 0 and evaluated.activations == 0
        assert evaluated.params == resized.memory.params and evaluated.optimizer == resized.memory.optimizer
        assert evaluated.total < resized.memory.total and resized.step_memory is resized.memory
    assert plan(dataclasses.replace(request, evaluates=False)).eval_memory is None
    [note] = [note for note in chosen.notes if note.startswith("eval step:")]
    assert "forward only at per_device_batch_size 8" in note and "compiles it first (aot/eval_compile.py)" in note
    assert "eval step (forward only, per_device_batch_size 8)" in chosen.describe()

    # A larger eval batch of its own is estimated and can decide the run: here on its one-slice minimum.
    bigger, rest = with_maxtext_keys(request, {"eval_per_device_batch_size": "16"})
    assert rest == {} and bigger.eval_per_device_batch_size == 16
    with pytest.raises(DoesNotFit) as refused:
        plan(bigger)
    assert "on 1 x v6e-8" in str(refused.value) and "in its eval step" in str(refused.value)
    # On two slices alone it fits, and the eval step is the larger of the two; MaxText gets the key.
    fixed = plan(dataclasses.replace(bigger, min_slices=None))
    assert fixed.step_memory == fixed.eval_memory and fixed.overrides()["eval_per_device_batch_size"] == "16"
    assert fixed.step_memory.total > fixed.memory.total
    # Two distinct eval steps, each compiled by compileCheck: MaxText's at start (16) and Grain's at the train batch.
    assert fixed.eval_batches == (16, 8) and chosen.eval_batches == (8,)
    assert plan(dataclasses.replace(request, evaluates=False)).eval_batches == ()
    # A worker that ran out of HBM finds the same plan, eval step included, in its own argv (core/advice.py).
    from core.advice import plan_of_maxtext_keys
    again = plan_of_maxtext_keys({**fixed.overrides(), "grain_eval_files": "gs://my-data/eval-*"}, "v6e", "2x4")
    assert again.evaluates and again.eval_batch == 16 and again.step_memory == fixed.step_memory
    # Without an eval split the eval batch changes nothing but the key MaxText gets.
    quiet = plan(dataclasses.replace(bigger, evaluates=False))
    assert quiet.step_memory == quiet.memory and quiet.overrides()["eval_per_device_batch_size"] == "16"


def test_a_smaller_eval_batch_of_its_own_is_planned_at_the_train_batch_grain_really_uses():
    """MaxText 0.2.5 compiles the eval step ahead of time at start at eval_per_device_batch_size
    (trainers/pre_train/train.py, get_shaped_batch(is_eval=True)), but Grain's eval batches are built at the train
    batch (input_pipeline/grain_data_processing.py: data_processing_utils.get_local_batch_size, from
    global_batch_size_to_load), so every eval pass runs at per_device_batch_size: a smaller eval key does not make
    the eval step smaller, and the plan must not say it does."""
    from core.maxtext_memory_keys import with_maxtext_keys

    request = PlanRequest("qwen3-0.6b", "v6e", "2x4", slices=2, per_device_batch_size=8, evaluates=True)
    smaller, _ = with_maxtext_keys(request, {"eval_per_device_batch_size": "2"})
    chosen = plan(smaller)
    assert chosen.eval_batch == 8
    assert chosen.eval_memory == plan(request).eval_memory
    # The key still reaches MaxText (it sizes the ahead-of-time compile), the plan's figure is the real pass's.
    assert chosen.overrides()["eval_per_device_batch_size"] == "2"
