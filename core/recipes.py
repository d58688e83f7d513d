"""The public tuned recipes each preset follows, per TPU generation, as data (pure: standard library and core only).

A recipe row holds what a published, measured MaxText run set: its libtpu flag groups (LIBTPU_INIT_ARGS) and
its MaxText kernel settings, with a citation (repository, path, commit, date) of where each came from, and the
flags we leave out with the reason. core/tpu_env.py builds every backend's LIBTPU_INIT_ARGS from these rows;
core/maxtext_args.py adds their kernel settings to every backend's MaxText argv; `recipe_summary` says, for the
offline plan, which recipe a run follows and where it departs from it.

Sources read for this file (snapshots):
- AI-Hypercomputer/tpu-recipes at c8cfe2f689081d36701a101cd73a70965d80926b (2026-08-07);
- AI-Hypercomputer/maxtext at e591f30cbbf217ed67ef71263ec0538239f9c3b8 (2026-08-22), and its tag
  tpu-recipes-v0.1.4 = 9f1820b472ef362e7b5c782fe1d6fda8a0943eff (2025-07-10), which every v6e Llama recipe
  below checks out: `benchmarks/xla_flags_library.py` (the flag groups) and
  `benchmarks/maxtext_trillium_model_configs.py` (the workloads). The tpu-recipes READMEs print the same
  workload definitions under "Workload Details".

What no recipe covers is MaxText's defaults: no tuned libtpu flags, no kernel settings.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Union

from core.presets import ModelPreset, preset as find_preset
from core.tpu_catalog import CATALOG, chips_in


@dataclass(frozen=True)
class Citation:
    repo: str       # owner/name on GitHub
    path: str
    commit: str     # full hash of the revision read
    date: str       # author date of that commit (YYYY-MM-DD)

    def __str__(self) -> str:
        return f"{self.repo} {self.path} @ {self.commit[:8]} ({self.date})"


@dataclass(frozen=True)
class FlagGroup:
    """A named group of MaxText's benchmarks/xla_flags_library.py; `dcn`: it tunes cross-slice (DCN) traffic,
    so it is sent only when a run spans slices (core/tpu_env.py)."""

    name: str
    flags: tuple[str, ...]
    dcn: bool = False


@dataclass(frozen=True)
class LeftOut:
    """Recipe flags we do not send, and why; LIBTPU_CHECKS records libtpu refusing them (scripts/libtpu_flag_check.py
    adds each LeftOut to what we send and compiles)."""

    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Measurement:
    """A throughput the recipe itself publishes (its run, its topology; not measured by this project)."""

    quote: str                  # the log line, verbatim from the recipe
    tflops_per_device: float
    software: str               # what the recipe ran it with
    libtpu: str                 # the libtpu of that software


@dataclass(frozen=True)
class Recipe:
    preset: str                 # core/presets.py name
    generation: str             # core/tpu_catalog.py generation
    source: Citation            # the recipe (README) a user follows
    workload: Citation          # where its MaxText workload (flags and tuning params) is defined
    workload_name: str          # benchmark_runner --model_name
    model_name: str             # the workload's MaxText model_type
    topology: str               # the slice it ran on (catalog spelling)
    slices: int
    flag_groups: tuple[FlagGroup, ...]
    left_out: tuple[LeftOut, ...]
    # MaxText keys the recipe sets that no planner option covers (attention kernel, embedding): launched as is.
    kernel_settings: Mapping[str, str]
    # The recipe's keys the planner or the run decides here (mesh, batch, remat, dtype, sequence, run settings):
    # compared with the plan by recipe_summary, never launched from here.
    planned_settings: Mapping[str, str]
    measurement: Measurement | None = None
    notes: tuple[str, ...] = ()

    @property
    def libtpu_flags(self) -> tuple[str, ...]:
        """The recipe's flags in its order, without the left-out ones and without the DCN groups."""
        dropped = {flag for item in self.left_out for flag in item.flags}
        return tuple(flag for group in self.flag_groups if not group.dcn
                     for flag in group.flags if flag not in dropped)

    @property
    def pod_type(self) -> str:
        gen = CATALOG[self.generation]
        return f"{gen.pod_type_prefix}-{chips_in(self.topology) * gen.cores_per_chip}"


# --- MaxText benchmarks/xla_flags_library.py @ tpu-recipes-v0.1.4 (9f1820b4, 2025-07-10) -----------------------
XLA_FLAGS_LIBRARY = Citation("AI-Hypercomputer/maxtext", "benchmarks/xla_flags_library.py",
                             "9f1820b472ef362e7b5c782fe1d6fda8a0943eff", "2025-07-10")

# "experimentally recommended values for compute bound models" (the MoE value is 81920).
DENSE_VMEM_LIMIT_FLAG = FlagGroup("DENSE_VMEM_LIMIT_FLAG", ("--xla_tpu_scoped_vmem_limit_kib=98304",))
# "Better memory layout for all-reduce (AR)."
LAYOUT_FOR_ALL_REDUCE_SCATTER = FlagGroup("LAYOUT_FOR_ALL_REDUCE_SCATTER", (
    "--xla_tpu_use_minor_sharding_for_major_trivial_input=true",
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1",
    "--xla_tpu_assign_all_reduce_scatter_layout=true",
))
# "xla_tpu_enable_data_parallel_all_reduce_opt: optimize DCN all-reduces used for data parallel sharding";
# "xla_tpu_data_parallel_opt_different_sized_ops: enable pipelining of data parallel ops across multiple
# iterations". The recipes send it on their single slice too; we send it only across slices.
DATA_PARALLEL_OVERLAP = FlagGroup("DATA_PARALLEL_OVERLAP", (
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true",
    "--xla_tpu_data_parallel_opt_different_sized_ops=true",
), dcn=True)
# "Continuation Fusion is a form of parallelizing compute work with collectives" — for the all-gathers of FSDP
# inside a slice (ICI), not for DCN.
CF_FOR_ALL_GATHER = FlagGroup("CF_FOR_ALL_GATHER", (
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
))
# The gradient all-reduce on the SparseCores, plus ENABLE_SPARSECORE_OFFLOADING_BASE_FLAGS (last five).
ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE = FlagGroup("ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE", (
    "--xla_tpu_enable_async_collective_fusion_fuse_all_reduce=false",
    "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true",
    "--xla_tpu_enable_all_reduce_offload_tracing=true",
    "--xla_tpu_use_tc_device_shape_on_sc=true",
    "--xla_sc_enable_instruction_fusion=false",
    "--xla_sc_disjoint_spmem=false",
    "--xla_sc_disable_megacore_partitioning=true",
    "--2a886c8_chip_config_name=megachip_tccontrol",
))
# "optimizations recommended when using host offloading" (our presets offload activations to host memory).
HOST_OFFLOAD_FLAGS = FlagGroup("HOST_OFFLOAD_FLAGS", (
    "--xla_tpu_enable_all_experimental_scheduler_features=true",
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true",
    "--xla_tpu_host_transfer_overlap_limit=24",
    "--xla_tpu_aggressive_opt_barrier_removal=ENABLED",
    "--xla_lhs_prioritize_async_depth_over_stall=ENABLED",
    "--xla_tpu_enable_ag_backward_pipelining=true",
    "--xla_should_allow_loop_variant_parameter_in_chain=ENABLED",
    "--xla_should_add_loop_invariant_op_in_chain=ENABLED",
    "--xla_max_concurrent_host_send_recv=100",
    "--xla_tpu_scheduler_percent_shared_memory_limit=100",
    "--xla_latency_hiding_scheduler_rerun=2",
))
# "Disables collective matmul operations."
DISABLE_COLLECTIVE_MATMUL = FlagGroup("DISABLE_COLLECTIVE_MATMUL", (
    "--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000",
))

# --- Flags the workers' libtpu refuses (see LIBTPU_CHECKS for the recorded runs) ---------------------------------
CHIP_CONFIG_UNKNOWN = LeftOut(
    ("--2a886c8_chip_config_name=megachip_tccontrol",),
    "unknown to libtpu 0.0.42.1, 0.0.50.1 and 0.0.52 (\"ERROR: Unknown command line flag '2a886c8_chip_config_name'\", "
    "libtpu exits); MaxText dropped it from ENABLE_SPARSECORE_OFFLOADING_BASE_FLAGS in commit 5b2712d6 "
    "(2026-01-26, PR AI-Hypercomputer/maxtext#3009)")
CF_ALL_GATHER_REFUSED = LeftOut(
    ("--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true", "--xla_enable_async_all_gather=true"),
    "this pair fails every compile on v4/v5p/v6e/tpu7x from libtpu 0.0.43.2 on (checked: 0.0.50.1, the workers', and 0.0.52): "
    "\"FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ... not supported/recommended "
    "on platforms other than TPU v5e\"; libtpu 0.0.42.1 still accepts it. The rest of CF_FOR_ALL_GATHER is kept")

# --- Measured software of the v6e recipes -----------------------------------------------------------------------
_V6E_SOFTWARE = ("MaxText tpu-recipes-v0.1.4 on us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.6.1-rev1 "
                 "(JAX 0.6.1; libtpu 0.0.15, the libtpu jax 0.6.1 pins)")
_TRILLIUM_CONFIGS = Citation("AI-Hypercomputer/maxtext", "benchmarks/maxtext_trillium_model_configs.py",
                             "9f1820b472ef362e7b5c782fe1d6fda8a0943eff", "2025-07-10")

# Splash-attention blocks, fused backward kernel and iota embedding: the same in both v6e Llama workloads.
_V6E_LLAMA_KERNEL = {
    **{key: "2048" for key in ("sa_block_q", "sa_block_kv", "sa_block_kv_compute", "sa_block_q_dkv",
                               "sa_block_kv_dkv", "sa_block_kv_dkv_compute", "sa_block_q_dq", "sa_block_kv_dq")},
    "sa_use_fused_bwd_kernel": "true",
    "use_iota_embed": "true",
}
# Keys of a recipe that belong to the planner (mesh, batch, memory policy) or to the run; compared, not launched.
_RUN_KEYS_OF_A_BENCHMARK = {"dataset_type": "synthetic", "enable_checkpointing": "false", "steps": "20",
                            "profiler": "xplane"}

RECIPES: tuple[Recipe, ...] = (
    Recipe(
        preset="llama3-8b", generation="v6e",
        source=Citation("AI-Hypercomputer/tpu-recipes", "training/trillium/Llama3.1-8B-MaxText/v6e-16/README.md",
                        "ac200ebcc5d5f7af21a4759b4b50ae2fe4466cde", "2026-06-27"),
        workload=_TRILLIUM_CONFIGS, workload_name="llama3_1_8b_8192_no_collective_matmul",
        model_name="llama3.1-8b", topology="4x4", slices=1,
        flag_groups=(DENSE_VMEM_LIMIT_FLAG, LAYOUT_FOR_ALL_REDUCE_SCATTER, DATA_PARALLEL_OVERLAP, CF_FOR_ALL_GATHER,
                     ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE, HOST_OFFLOAD_FLAGS, DISABLE_COLLECTIVE_MATMUL),
        left_out=(CHIP_CONFIG_UNKNOWN, CF_ALL_GATHER_REFUSED),
        kernel_settings=_V6E_LLAMA_KERNEL,
        planned_settings={
            "per_device_batch_size": "3", "ici_fsdp_parallelism": "-1", "max_target_length": "8192",
            "attention": "flash", "remat_policy": "custom", "weight_dtype": "float32",
            "offload": "decoder_layer_input,out_proj,query_proj,key_proj,value_proj", **_RUN_KEYS_OF_A_BENCHMARK,
        },
        measurement=Measurement(
            quote="completed step: 14, seconds: 3.393, TFLOP/s/device: 419.485, Tokens/s/device: 7243.378, "
                  "total_weights: 393216, loss: 3.974",
            tflops_per_device=419.485, software=_V6E_SOFTWARE, libtpu="0.0.15"),
        notes=("the same workload is published for v6e-8 and v6e-32 (413.433 and 407.225 TFLOP/s/device); v6e-64 "
               "and larger use other workloads (llama3_1_8b_8192_bs5, llama3_1_8b_8192: batch 5 or 4, no "
               "DISABLE_COLLECTIVE_MATMUL)",),
    ),
    Recipe(
        preset="llama3-70b", generation="v6e",
        source=Citation("AI-Hypercomputer/tpu-recipes", "training/trillium/Llama3.1-70B-MaxText/v6e-32/README.md",
                        "7e88b6d146a00901446f8a11244d49a471d8242b", "2025-10-07"),
        workload=_TRILLIUM_CONFIGS, workload_name="llama3_1_70b_8192_bs2_bfloat16_no_collective_matmul",
        model_name="llama3.1-70b", topology="4x8", slices=1,
        flag_groups=(DENSE_VMEM_LIMIT_FLAG, LAYOUT_FOR_ALL_REDUCE_SCATTER, DATA_PARALLEL_OVERLAP, CF_FOR_ALL_GATHER,
                     HOST_OFFLOAD_FLAGS, DISABLE_COLLECTIVE_MATMUL),
        left_out=(CF_ALL_GATHER_REFUSED,),
        kernel_settings=_V6E_LLAMA_KERNEL,
        planned_settings={
            "per_device_batch_size": "2", "ici_fsdp_parallelism": "-1", "max_target_length": "8192",
            "attention": "flash", "remat_policy": "custom", "weight_dtype": "bfloat16",
            "offload": "decoder_layer_input,query_proj,key_proj,value_proj", **_RUN_KEYS_OF_A_BENCHMARK,
        },
        measurement=Measurement(
            quote="completed step: 34, seconds: 17.790, TFLOP/s/device: 443.385, Tokens/s/device: 920.965, "
                  "total_weights: 524288, loss: 11.457",
            tflops_per_device=443.385, software=_V6E_SOFTWARE, libtpu="0.0.15"),
        notes=("v6e-64/128/256 recipes use other workloads (llama3_1_70b_8192_bs2, _bs4, llama3_1_70b_8192: float32 "
               "weights, no DISABLE_COLLECTIVE_MATMUL)",),
    ),
)

# Every Trillium run of the two Llama recipes that tpu-recipes publishes with a measured step (one slice each, 8192
# tokens, flash attention, custom remat offloading the decoder-layer input and q/k/v — 8B also out_proj — to host;
# MaxText tpu-recipes-v0.1.4, JAX 0.6.1). The planner must accept each at its published batch and weight dtype
# (tests/core/test_xla_calibration.py), and quotes their throughput as the expected range (expected_step).


@dataclass(frozen=True)
class PublishedRun:
    preset: str
    generation: str
    topology: str               # one slice
    workload_name: str
    per_device_batch_size: float
    weight_dtype: str
    quote: str                  # the README's log line, verbatim
    seconds: float              # step time
    tflops_per_device: float
    tokens_per_second_per_device: float
    source: Citation

    @property
    def pod_type(self) -> str:
        return f"{self.generation}-{chips_in(self.topology) * CATALOG[self.generation].cores_per_chip}"

    @property
    def recipe_name(self) -> str:
        """The recipe's folder name in tpu-recipes, e.g. Llama3.1-8B (training/trillium/Llama3.1-8B-MaxText/...)."""
        return self.source.path.split("/")[2].removesuffix("-MaxText")


def _published(preset: str, size: str, topology: str, workload: str, batch: float, dtype: str, quote: str,
               commit: str, date: str) -> PublishedRun:
    fields = dict(item.split(": ") for item in quote.split(", "))
    chips = chips_in(topology)
    path = f"training/trillium/Llama3.1-{size}-MaxText/v6e-{chips}/README.md"
    return PublishedRun(preset, "v6e", topology, workload, batch, dtype, quote, float(fields["seconds"]),
                        float(fields["TFLOP/s/device"]), float(fields["Tokens/s/device"]),
                        Citation("AI-Hypercomputer/tpu-recipes", path, commit, date))


_8B = ("llama3-8b", "8B")
_70B = ("llama3-70b", "70B")
_8B_AT = ("ac200ebcc5d5f7af21a4759b4b50ae2fe4466cde", "2026-06-27")
_70B_AT = ("7e88b6d146a00901446f8a11244d49a471d8242b", "2025-10-07")
PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    _published(*_8B, "2x4", "llama3_1_8b_8192_no_collective_matmul", 3, "float32",
               "completed step: 14, seconds: 3.443, TFLOP/s/device: 413.433, Tokens/s/device: 7138.890, "
               "total_weights: 196608, loss: 2.136", *_8B_AT),
    _published(*_8B, "4x4", "llama3_1_8b_8192_no_collective_matmul", 3, "float32",
               "completed step: 14, seconds: 3.393, TFLOP/s/device: 419.485, Tokens/s/device: 7243.378, "
               "total_weights: 393216, loss: 3.974", *_8B_AT),
    _published(*_8B, "4x8", "llama3_1_8b_8192_no_collective_matmul", 3, "float32",
               "completed step: 14, seconds: 3.495, TFLOP/s/device: 407.225, Tokens/s/device: 7031.689, "
               "total_weights: 786432, loss: 5.864", *_8B_AT),
    _published(*_8B, "8x8", "llama3_1_8b_8192_bs5", 5, "float32",
               "completed step: 14, seconds: 5.652, TFLOP/s/device: 419.701, Tokens/s/device: 7247.111, "
               "total_weights: 2621440, loss: 8.534", *_8B_AT),
    _published(*_8B, "8x16", "llama3_1_8b_8192", 4, "float32",
               "completed step: 14, seconds: 4.602, TFLOP/s/device: 412.319, Tokens/s/device: 7119.648, "
               "total_weights: 4194304, loss: 9.285", *_8B_AT),
    _published(*_8B, "16x16", "llama3_1_8b_8192", 4, "float32",
               "completed step: 14, seconds: 4.546, TFLOP/s/device: 417.397, Tokens/s/device: 7207.336, "
               "total_weights: 8388608, loss: 10.131", *_8B_AT),
    _published(*_70B, "4x8", "llama3_1_70b_8192_bs2_bfloat16_no_collective_matmul", 2, "bfloat16",
               "completed step: 34, seconds: 17.790, TFLOP/s/device: 443.385, Tokens/s/device: 920.965, "
               "total_weights: 524288, loss: 11.457", *_70B_AT),
    _published(*_70B, "8x8", "llama3_1_70b_8192_bs2", 2, "float32",
               "completed step: 14, seconds: 18.688, TFLOP/s/device: 422.091, Tokens/s/device: 876.736, "
               "total_weights: 1048576, loss: 0.865", *_70B_AT),
    _published(*_70B, "8x16", "llama3_1_70b_8192_bs4", 4, "float32",
               "completed step: 14, seconds: 34.786, TFLOP/s/device: 453.500, Tokens/s/device: 941.976, "
               "total_weights: 4194304, loss: 4.174", *_70B_AT),
    _published(*_70B, "16x16", "llama3_1_70b_8192", 5, "float32",
               "completed step: 14, seconds: 42.656, TFLOP/s/device: 462.297, Tokens/s/device: 960.248, "
               "total_weights: 10485760, loss: 6.658", *_70B_AT),
)


def expected_step(model: str, generation: str, max_target_length: int, per_device_batch_size: float) -> str | None:
    """The step time and MFU a run can expect from the published runs of its model on its generation (their
    tokens/s and TFLOP/s per device, min..max over topologies), or None when none was published for that model,
    generation and sequence length. Not measured by this project; DCN (several slices) and other batches were not
    part of those runs."""
    runs = [r for r in PUBLISHED_RUNS if (r.preset, r.generation) == (model, generation)]
    if not runs or max_target_length != 8192:
        return None
    tokens = per_device_batch_size * max_target_length
    fast = max(r.tokens_per_second_per_device for r in runs)
    slow = min(r.tokens_per_second_per_device for r in runs)
    peak = CATALOG[generation].peak_bf16_tflops_per_chip / CATALOG[generation].devices_per_chip
    low_mfu = min(r.tflops_per_device for r in runs) / peak
    high_mfu = max(r.tflops_per_device for r in runs) / peak
    where = ", ".join(sorted({r.pod_type for r in runs}, key=lambda name: int(name.split("-")[1])))
    return (f"expected step {tokens / fast:.1f}-{tokens / slow:.1f} s at {_number(per_device_batch_size)} x "
            f"{max_target_length} tokens per device, MFU {low_mfu:.0%}-{high_mfu:.0%} (published {model} runs on "
            f"one slice of {where}: {slow:.0f}-{fast:.0f} tokens/s/device; not measured by us)")


# Presets and generations without a recipe, and what public material exists for them (searched in the two
# snapshots named in the module docstring).
NO_RECIPE: Mapping[str, str] = {
    "qwen3-0.6b": ("no public tuned pre-training recipe: tpu-recipes has Qwen3 only as qwen3-235b-a22b training on "
                   "Ironwood and vLLM inference, MaxText benchmarks/*_model_configs.py have no qwen3 workload; "
                   "MaxText defaults"),
    "tiny": "CPU test model, never run on TPU; MaxText defaults",
    "tiny-text": "CPU test model, never run on TPU; MaxText defaults",
}
# Recipes that exist for a preset on another generation but are not adopted, with the reason.
NOT_ADOPTED: Mapping[tuple[str, str], str] = {
    ("llama3-70b", "tpu7x"): (
        "AI-Hypercomputer/tpu-recipes training/ironwood/llama3.1-70b/8k-bf16-tpu7x-4x4x4/xpk/run_recipe.sh "
        "@ edf6fa7d (2025-12-17) exists but publishes no throughput, keeps every remat tensor on the device "
        "(our preset offloads to host) and uses bf16 Adam moments (mu_dtype) that core/memory.py does not model; "
        "not adopted: MaxText defaults on tpu7x"),
}

# --- libtpu acceptance of the flags we send --------------------------------------------------------------------


@dataclass(frozen=True)
class LibtpuCheck:
    """One run of scripts/libtpu_flag_check.py: LIBTPU_INIT_ARGS = the flag set `what` names (identified exactly by
    its sha256), one FSDP train step compiled ahead of time for `slices` slices of `topology` (no TPU needed),
    and libtpu's verdict."""

    libtpu: str
    topology: str        # jax.experimental.topologies name
    slices: int
    what: str
    flags_sha256: str    # sha256 of the LIBTPU_INIT_ARGS string, first 16 hex digits
    verdict: str         # "OK", or libtpu's first error line

    @property
    def ok(self) -> bool:
        return self.verdict == "OK"

    @staticmethod
    def digest(flags: str) -> str:
        return hashlib.sha256(flags.encode()).hexdigest()[:16]


# Also checked once by hand (2026-11-22), beyond the small probe: MaxText 0.2.5's own ahead-of-time compile
# (maxtext.trainers.pre_train.train_compile, JAX 0.10.2 loading libtpu 0.0.52's libtpu.so) of the full train step
# with the argv of core/maxtext_args.py and the LIBTPU_INIT_ARGS of core/tpu_env.py, both models cut to 2 decoder
# layers: llama3-8b on 2 x v6e-16 (flags incl. the DCN part) and llama3-70b on 1 x v6e-32 both compiled. That was
# libtpu 0.0.52, before the worker lock paired libtpu with jax (jax[tpu] 0.12.0.1 -> libtpu 0.0.50.1); under 0.0.50.1
# only the small probes below were re-run (same verdicts as 0.0.52), not MaxText's full compile.
# BEGIN LIBTPU_CHECKS (written by `python scripts/libtpu_flag_check.py --write`; do not edit by hand)
# libtpu 0.0.52 rows: 2026-11-22, 19 probes, 14 OK.
# libtpu 0.0.42.1 rows: 2026-11-22, 19 probes, 17 OK.
# libtpu 0.0.50.1 rows: 2026-11-25, 19 probes, 14 OK.
LIBTPU_CHECKS: tuple[LibtpuCheck, ...] = (
    LibtpuCheck('0.0.42.1', 'tpu7x:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.42.1', 'tpu7x:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v4:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v4:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v5e:2x2', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v5e:2x2', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v5p:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v5p:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-70b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '1c4fb4f5105803f9',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-70b recipe as published', '9457b2f16e3d2cec',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-70b send', '482a490dd834a070',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-8b + left out --2a886c8_chip_config_name=megachip_tccontrol', 'bb947d15b9c9c6b5',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-8b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '8bfb2242c75a3ea7',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-8b recipe as published', '19d32d9218d244cc',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'llama3-8b send', 'f8bba3c47061bbeb',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 1, 'qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 2, 'llama3-70b send', '9ec1fc146210fb10',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 2, 'llama3-8b send', 'cdda1e09321f76f7',
                'OK'),
    LibtpuCheck('0.0.42.1', 'v6e:2x2', 2, 'qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.50.1', 'tpu7x:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.50.1', 'tpu7x:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v4:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v4:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v5e:2x2', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v5e:2x2', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v5p:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v5p:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-70b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '1c4fb4f5105803f9',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-70b recipe as published', '9457b2f16e3d2cec',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-70b send', '482a490dd834a070',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-8b + left out --2a886c8_chip_config_name=megachip_tccontrol', 'bb947d15b9c9c6b5',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-8b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '8bfb2242c75a3ea7',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-8b recipe as published', '19d32d9218d244cc',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'llama3-8b send', 'f8bba3c47061bbeb',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 1, 'qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 2, 'llama3-70b send', '9ec1fc146210fb10',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 2, 'llama3-8b send', 'cdda1e09321f76f7',
                'OK'),
    LibtpuCheck('0.0.50.1', 'v6e:2x2', 2, 'qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.52', 'tpu7x:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.52', 'tpu7x:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.52', 'v4:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.52', 'v4:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.52', 'v5e:2x2', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.52', 'v5e:2x2', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.52', 'v5p:2x2x1', 1, 'llama3-8b, llama3-70b, qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.52', 'v5p:2x2x1', 2, 'llama3-8b, llama3-70b, qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-70b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '1c4fb4f5105803f9',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-70b recipe as published', '9457b2f16e3d2cec',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-70b send', '482a490dd834a070',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-8b + left out --2a886c8_chip_config_name=megachip_tccontrol', 'bb947d15b9c9c6b5',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-8b + left out --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true', '8bfb2242c75a3ea7',
                'FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms '),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-8b recipe as published', '19d32d9218d244cc',
                "ERROR: Unknown command line flag '2a886c8_chip_config_name'"),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'llama3-8b send', 'f8bba3c47061bbeb',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 1, 'qwen3-0.6b send', 'e3b0c44298fc1c14',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 2, 'llama3-70b send', '9ec1fc146210fb10',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 2, 'llama3-8b send', 'cdda1e09321f76f7',
                'OK'),
    LibtpuCheck('0.0.52', 'v6e:2x2', 2, 'qwen3-0.6b send', '1b4bd04404841de0',
                'OK'),
)
# END LIBTPU_CHECKS


# --- lookups ----------------------------------------------------------------------------------------------------
def recipe_for(preset_name: str, generation: str) -> Recipe | None:
    for recipe in RECIPES:
        if (recipe.preset, recipe.generation) == (preset_name, generation):
            return recipe
    return None


def recipe_libtpu_flags(preset_name: str, generation: str) -> tuple[str, ...]:
    """The recipe's non-DCN flags we send for this preset on this generation (none without a recipe)."""
    recipe = recipe_for(preset_name, generation)
    return recipe.libtpu_flags if recipe else ()


def recipe_kernel_settings(preset_name: str, generation: str, attention: str) -> dict[str, str]:
    """MaxText keys from the recipe: splash-attention keys (sa_*) only when the run uses flash attention."""
    recipe = recipe_for(preset_name, generation)
    if recipe is None:
        return {}
    return {key: value for key, value in recipe.kernel_settings.items()
            if attention == "flash" or not key.startswith("sa_")}


# --- the offline plan's view --------------------------------------------------------------------------------------
PlanOrPreset = Union["Plan", ModelPreset, str]  # noqa: F821 (core.planner.Plan; not imported: planner imports presets)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def recipe_summary(plan_or_preset: PlanOrPreset, generation: str, topology: str) -> list[str]:
    """Which recipe (path, version) the run follows on `generation` `topology` and where it departs from it.

    `plan_or_preset`: a core.planner.Plan (its batch, mesh, remat, dtype and slices are compared), a ModelPreset
    or a preset name (its defaults are compared, on one slice). Pure: no MaxText, no libtpu.
    """
    plan = None if isinstance(plan_or_preset, (str, ModelPreset)) else plan_or_preset
    model = (find_preset(plan_or_preset) if isinstance(plan_or_preset, str)
             else plan_or_preset if isinstance(plan_or_preset, ModelPreset) else plan.model)
    recipe = recipe_for(model.name, generation)
    if recipe is None:
        why = (NOT_ADOPTED.get((model.name, generation)) or NO_RECIPE.get(model.name)
               or f"no public tuned recipe for {model.name} on {generation} (recipes exist for: "
                  + (", ".join(f"{r.generation}" for r in RECIPES if r.preset == model.name) or "none") + ")")
        return [f"recipe: none for {model.name} on {generation}: {why}",
                "libtpu flags: the DCN part only (data-parallel overlap and megascale interfaces, across slices)"]

    lines = [f"recipe: {recipe.source} (workload {recipe.workload_name}, {recipe.workload})"]
    if recipe.measurement:
        m = recipe.measurement
        lines.append(f"recipe's own number on 1 x {recipe.pod_type} ({recipe.topology}), not measured by us: "
                     f"{m.tflops_per_device} TFLOP/s/device (\"{m.quote}\"; {m.software})")
    kept = [g.name for g in recipe.flag_groups if not g.dcn]
    lines.append(f"launched from it: libtpu {' + '.join(kept)}; MaxText "
                 + ", ".join(f"{k}={v}" for k, v in recipe.kernel_settings.items()))

    differs: list[str] = []
    if recipe.model_name != model.maxtext_model_name:
        differs.append(f"model {model.maxtext_model_name} vs the recipe's {recipe.model_name}: same shapes and "
                       "parameter count, but MaxText 0.2.5 applies Llama 3.1's RoPE frequency scaling only to "
                       "model names starting with llama3.1 (maxtext/layers/attentions.py), so our RoPE is Llama 3's")
    slices = plan.slices if plan else 1
    if (topology, slices) != (recipe.topology, recipe.slices):
        differs.append(f"topology {slices} x {generation} {topology} vs the recipe's {recipe.slices} x "
                       f"{recipe.pod_type} ({recipe.topology}): the recipe never ran on it, its number does not "
                       "carry over")
    if slices > 1:
        layout = f"dcn data {plan.dcn_data} x fsdp {plan.dcn_fsdp}"
        layout += "".join(f"; {note}" for note in plan.notes if note.startswith("FSDP across slices"))
        differs.append(f"across slices ({layout}) we add DATA_PARALLEL_OVERLAP and the megascale interfaces; the "
                       "recipe ran on one slice and sent DATA_PARALLEL_OVERLAP there")
    elif any(g.dcn for g in recipe.flag_groups):
        differs.append("DATA_PARALLEL_OVERLAP not sent on one slice (it tunes DCN all-reduces); the recipe sends it")
    for item in recipe.left_out:
        differs.append(f"left out {' '.join(item.flags)}: {item.reason}")
    ours = _our_settings(model, plan)
    for key, theirs in recipe.planned_settings.items():
        mine = ours.get(key)
        if key in _RUN_KEYS_OF_A_BENCHMARK or mine is None or mine == theirs:
            continue
        differs.append(f"{key} {mine} vs the recipe's {theirs}" + _why(key, plan, model))
    differs.append("run settings are ours: checkpoints on, the configured dataset and steps (the recipe: "
                   "synthetic data, no checkpoints, 20 steps, xplane profiler)")
    measured_with = recipe.measurement.libtpu if recipe.measurement else "unstated"
    differs.append(f"libtpu: the workers run worker_env/requirements.lock's, the recipe measured with {measured_with}; "
                   "LIBTPU_CHECKS records that libtpu accepts the flags and compiles with them, not that they are "
                   "still faster")
    lines += [f"differs: {d}" for d in differs]
    lines += [f"note: {n}" for n in recipe.notes]
    return lines


def _our_settings(model: ModelPreset, plan) -> dict[str, str]:
    source = plan if plan is not None else model
    settings = {
        "per_device_batch_size": _number(source.per_device_batch_size),
        "max_target_length": str(source.max_target_length),
        "attention": source.attention,
        "remat_policy": source.remat_policy,
        "weight_dtype": source.weight_dtype,
        "offload": ",".join(source.remat_offload),
    }
    if plan is not None:
        # -1 in a recipe means "every device of the slice" on the fsdp axis.
        settings["ici_fsdp_parallelism"] = ("-1" if plan.ici_fsdp == plan.shape.devices
                                            else f"{plan.ici_fsdp} (tensor {plan.ici_tensor})")
    return settings


def _why(key: str, plan, model: ModelPreset) -> str:
    """Why the plan's value is not the preset's tuned one: the planner's own note, else the user asked for it."""
    if plan is None:
        return ""
    notes = [note for note in plan.notes if note.startswith(key)]
    return f" ({'; '.join(notes)})" if notes else " (asked for explicitly)"
