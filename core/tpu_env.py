"""Environment of TPU worker containers: the one documented place for multislice env and libtpu flags.

Pure data, no Pulumi import; every workload backend (RayJob, JobSet, Pathways) takes its TPU env from here.
LIBTPU_INIT_ARGS = the tuned recipe's flags for the model and generation (core/recipes.py, the data with its
sources) + the DCN part when a run spans slices (data-parallel overlap, megascale interfaces).
"""
from __future__ import annotations

from core.recipes import DATA_PARALLEL_OVERLAP, recipe_libtpu_flags
from core.tpu_catalog import Generation

# Port libtpu's megascale runtime listens on for slice-to-slice traffic. Ray Train's JaxTrainer uses the
# same default (ray._private.accelerators.tpu.DEFAULT_MEGASCALE_PORT = "8081") and computes
# MEGASCALE_COORDINATOR_ADDRESS / MEGASCALE_NUM_SLICES / MEGASCALE_SLICE_ID per worker group itself, always
# overwriting pod values (ray.train.v2.jax.config) — so those three are deliberately not set here.
MEGASCALE_PORT = "8081"

# The DCN part of LIBTPU_INIT_ARGS, sent only when a run spans slices: MaxText's DATA_PARALLEL_OVERLAP group
# (core/recipes.py; "optimize DCN all-reduces used for data parallel sharding") and the megascale interfaces below.
# Not the continuation-fusion group for all-gathers (CF_FOR_ALL_GATHER) that used to follow it here: that one
# overlaps the ICI (FSDP) all-gathers, not DCN traffic, and from libtpu 0.0.43.2 on its
# `--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true` + `--xla_enable_async_all_gather=true` pair
# fails every compile on v4, v5p, v6e and tpu7x ("FAILED_PRECONDITION: Continuation fusion for AllGather is
# enabled on platform ..."); the workers run libtpu 0.0.52 (worker_env/requirements.lock).
_DCN_OVERLAP_FLAGS = DATA_PARALLEL_OVERLAP.flags


def pod_dcn_nics(dcn_networks: int, *, dranet_claim: bool, host_network: bool) -> int:
    """Extra NICs (beyond eth0) a TPU pod sees: the DRANET claim's, which asks one per DCN network, or on the
    host network the node's own, attached one per DCN network by the slice pool. A pod in its own network
    namespace without a claim has eth0 only."""
    return dcn_networks if (dranet_claim or host_network) else 0


def megascale_interface_flag(dcn_nics: int) -> str:
    """libtpu flag naming the interfaces the megascale (cross-slice) gRPC traffic may use: the DCN NICs
    eth1..ethN and loopback. Without it cross-slice traffic leaves through eth0 and the DCN VPCs carry
    nothing. Source: the GKE multislice tutorial's worker env (`eth1,eth2,lo` for its two DCN networks; see
    docs/assumptions.md); no Google document states the flag."""
    interfaces = [f"eth{index}" for index in range(1, dcn_nics + 1)] + ["lo"]
    return "--megascale_grpc_interface_prefixes=" + ",".join(interfaces)


def libtpu_init_args(model: str, generation: Generation, slices: int, dcn_nics: int = 0) -> str:
    """LIBTPU_INIT_ARGS of the processes that compile and run the model (every backend's TPU workers).

    The tuned recipe's flags for `model` on `generation` (core/recipes.py: none without a recipe, and never the
    flags the workers' libtpu refuses), then the DCN part when the run spans slices: data-parallel overlap and,
    when the pod has DCN NICs, the megascale interfaces.
    """
    flags = recipe_libtpu_flags(model, generation.name)
    if slices > 1:
        flags += _DCN_OVERLAP_FLAGS
    return " ".join(flags + dcn_transport_flags(slices, dcn_nics))


def dcn_transport_flags(slices: int, dcn_nics: int) -> tuple[str, ...]:
    """Flags for libtpu's megascale transport alone (Pathways workers, which compile nothing, take only these).
    Megascale only runs between slices, and the flag is only right when the NICs it names exist in the pod."""
    return (megascale_interface_flag(dcn_nics),) if slices > 1 and dcn_nics > 0 else ()


def tpu_worker_env(model: str, generation: Generation, slices: int, dcn_nics: int = 0) -> list[dict]:
    """Container env (Kubernetes EnvVar dicts) for a TPU worker running `model` (a core/presets.py name).
    `dcn_nics`: pod_dcn_nics(...) of the pod."""
    env = [
        {"name": "JAX_PLATFORMS", "value": "tpu,cpu"},
        # libtpu's PJRT plugin API compatibility mode, as the GKE TPU examples set it for JAX.
        {"name": "ENABLE_PJRT_COMPATIBILITY", "value": "true"},
        {"name": "LIBTPU_INIT_ARGS", "value": libtpu_init_args(model, generation, slices, dcn_nics)},
    ]
    if slices > 1:
        env.append({"name": "MEGASCALE_PORT", "value": MEGASCALE_PORT})
    return env
