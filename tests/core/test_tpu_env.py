"""LIBTPU_INIT_ARGS of the TPU workers (core/tpu_env.py): what every backend hands libtpu."""
import pytest

from core.tpu_catalog import CATALOG as GENERATIONS
from core.tpu_env import libtpu_init_args, tpu_worker_env


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


@pytest.mark.parametrize("generation", sorted(set(GENERATIONS) - {"v5e"}))
@pytest.mark.parametrize("slices", [1, 2])
def test_no_generation_but_v5e_gets_all_gather_continuation_fusion(generation, slices):
    """The multislice flags once carried MaxText's CF_FOR_ALL_GATHER group; with the workers' libtpu 0.0.52 every
    compile on v4/v5p/v6e/tpu7x then failed before step 0."""
    env = {e["name"]: e["value"] for e in tpu_worker_env(GENERATIONS[generation], slices, dcn_nics=2)}
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


def test_dcn_overlap_only_across_slices():
    v6e = GENERATIONS["v6e"]
    assert "--xla_tpu_enable_data_parallel_all_reduce_opt=true" in libtpu_init_args(v6e, multislice=True)
    assert "data_parallel" not in libtpu_init_args(v6e, multislice=False)
