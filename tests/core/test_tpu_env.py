"""LIBTPU_INIT_ARGS of the TPU workers (core/tpu_env.py): what every backend hands libtpu."""
import pytest

from core.presets import PRESETS
from core.tpu_catalog import CATALOG as GENERATIONS
from core.tpu_env import libtpu_init_args, tpu_worker_env

TPU_PRESETS = sorted(name for name, p in PRESETS.items() if not p.cpu_only)


def flag_values(args: str) -> dict[str, str]:
    """libtpu reads its flags like absl: `--name=value`, the last occurrence wins."""
    values = {}
    for flag in args.split():
        name, _, value = flag.removeprefix("--").partition("=")
        values[name] = value
    return values


def enables_all_gather_continuation_fusion(args: str) -> bool:
    """The flag combination libtpu >= 0.0.43.2 refuses at every compile on TPUs other than v5e
    ("FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ...")."""
    values = flag_values(args)
    return (values.get("xla_tpu_enable_async_collective_fusion_fuse_all_gather") == "true"
            and values.get("xla_enable_async_all_gather") == "true"
            and values.get("xla_tpu_enable_async_collective_fusion") != "false")


@pytest.mark.parametrize("model", TPU_PRESETS)
@pytest.mark.parametrize("generation", sorted(set(GENERATIONS) - {"v5e"}))
@pytest.mark.parametrize("slices", [1, 2])
def test_no_generation_but_v5e_gets_all_gather_continuation_fusion(model, generation, slices):
    """The multislice flags once carried MaxText's CF_FOR_ALL_GATHER group, and every public v6e Llama recipe
    does; with the workers' libtpu (0.0.50.1; 0.0.52 too) every compile on v4/v5p/v6e/tpu7x then fails before step 0."""
    env = {e["name"]: e["value"] for e in tpu_worker_env(model, GENERATIONS[generation], slices, dcn_nics=2)}
    assert not enables_all_gather_continuation_fusion(env["LIBTPU_INIT_ARGS"]), env["LIBTPU_INIT_ARGS"]


def test_the_refused_combination_is_recognised():
    """The detector above must see the combination MaxText's CF_FOR_ALL_GATHER group sets."""
    cf_for_all_gather = ("--xla_tpu_enable_async_collective_fusion=true "
                         "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
                         "--xla_tpu_enable_async_collective_fusion_multiple_steps=true "
                         "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true")
    assert enables_all_gather_continuation_fusion(cf_for_all_gather)
    assert not enables_all_gather_continuation_fusion(
        cf_for_all_gather + " --xla_tpu_enable_async_collective_fusion_fuse_all_gather=false")


@pytest.mark.parametrize("model", TPU_PRESETS)
def test_dcn_part_only_across_slices(model):
    v6e = GENERATIONS["v6e"]
    one, two = libtpu_init_args(model, v6e, 1, dcn_nics=2), libtpu_init_args(model, v6e, 2, dcn_nics=2)
    assert "data_parallel" not in one and "megascale" not in one
    assert two.split() == one.split() + ["--xla_tpu_enable_data_parallel_all_reduce_opt=true",
                                         "--xla_tpu_data_parallel_opt_different_sized_ops=true",
                                         "--megascale_grpc_interface_prefixes=eth1,eth2,lo"]
    assert "megascale" not in libtpu_init_args(model, v6e, 2, dcn_nics=0)   # no NICs to name


def test_the_recipe_flags_reach_the_workers_and_nothing_else_does():
    """llama3-8b on v6e sends its recipe's flags; the same preset on v5p and qwen3-0.6b (no recipe) send none
    on one slice (MaxText defaults)."""
    llama = libtpu_init_args("llama3-8b", GENERATIONS["v6e"], 1).split()
    assert "--xla_tpu_scoped_vmem_limit_kib=98304" in llama
    assert "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true" in llama
    assert "--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000" in llama
    assert not any("2a886c8_chip_config_name" in flag for flag in llama)
    assert libtpu_init_args("llama3-8b", GENERATIONS["v5p"], 1) == ""
    assert libtpu_init_args("qwen3-0.6b", GENERATIONS["v6e"], 1) == ""
