"""Environment of TPU worker containers: the one documented place for multislice env and libtpu flags.

Pure data, no Pulumi import; every workload backend (RayJob, JobSet, Pathways) takes its TPU env from here.
"""
from __future__ import annotations

from core.tpu_catalog import Generation

# Port libtpu's megascale runtime listens on for slice-to-slice traffic. Ray Train's JaxTrainer uses the
# same default (ray._private.accelerators.tpu.DEFAULT_MEGASCALE_PORT = "8081") and computes
# MEGASCALE_COORDINATOR_ADDRESS / MEGASCALE_NUM_SLICES / MEGASCALE_SLICE_ID per worker group itself, always
# overwriting pod values (ray.train.v2.jax.config) — so those three are deliberately not set here.
MEGASCALE_PORT = "8081"

# Flags that let XLA overlap the data-parallel gradient all-reduce over DCN with compute: MaxText's
# DATA_PARALLEL_OVERLAP group (benchmarks/xla_flags_library.py, tag tpu-recipes-v0.1.4: "optimize DCN all-reduces
# used for data parallel sharding"). Only these two: the continuation-fusion group for all-gathers that used to
# follow them here (CF_FOR_ALL_GATHER) overlaps the ICI (FSDP) all-gathers, not DCN traffic, and from libtpu
# 0.0.43.2 on `--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true` with
# `--xla_enable_async_all_gather=true` fails every compile on v4, v5p, v6e and tpu7x ("FAILED_PRECONDITION:
# Continuation fusion for AllGather is enabled on platform ..., but it is not supported/recommended on platforms
# other than TPU v5e"); the workers run libtpu 0.0.52 (worker_env/requirements.lock).
_DCN_OVERLAP_FLAGS = (
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true",
    "--xla_tpu_data_parallel_opt_different_sized_ops=true",
)

# Per generation: flags beyond the common set. v6e: the tuned Trillium recipes raise the scoped VMEM limit
# (tpu-recipes trillium Llama3.1 MaxText workloads use 98304 KiB).
_GENERATION_FLAGS: dict[str, tuple[str, ...]] = {
    "v4": (),
    "v5e": (),
    "v5p": (),
    "v6e": ("--xla_tpu_scoped_vmem_limit_kib=98304",),
    "tpu7x": (),
}


def pod_dcn_nics(dcn_networks: int, *, dranet_claim: bool, host_network: bool) -> int:
    """Extra NICs (beyond eth0) a TPU pod sees: the DRANET claim's, which asks one per DCN network, or on the
    host network the node's own, attached one per DCN network by the slice pool. A pod in its own network
    namespace without a claim has eth0 only."""
    return dcn_networks if (dranet_claim or host_network) else 0


def megascale_interface_flag(dcn_nics: int) -> str:
    """libtpu flag naming the interfaces the megascale (cross-slice) gRPC traffic may use: the DCN NICs
    eth1..ethN and loopback. Without it cross-slice traffic leaves through eth0 and the DCN VPCs carry
    nothing. Source: the GKE multislice tutorial's worker env (`eth1,eth2,lo` for its two DCN networks; see
    README "What the stack assumes about GCP and Kubernetes"); no Google document states the flag."""
    interfaces = [f"eth{index}" for index in range(1, dcn_nics + 1)] + ["lo"]
    return "--megascale_grpc_interface_prefixes=" + ",".join(interfaces)


def libtpu_init_args(generation: Generation, multislice: bool, dcn_nics: int = 0) -> str:
    flags = _GENERATION_FLAGS[generation.name] + (_DCN_OVERLAP_FLAGS if multislice else ())
    # Megascale only runs between slices, and the flag is only right when the NICs it names exist in the pod.
    if multislice and dcn_nics > 0:
        flags += (megascale_interface_flag(dcn_nics),)
    return " ".join(flags)


def tpu_worker_env(generation: Generation, slices: int, dcn_nics: int = 0) -> list[dict]:
    """Container env (Kubernetes EnvVar dicts) for a TPU worker. `dcn_nics`: pod_dcn_nics(...) of the pod."""
    env = [
        {"name": "JAX_PLATFORMS", "value": "tpu,cpu"},
        # libtpu's PJRT plugin API compatibility mode, as the GKE TPU examples set it for JAX.
        {"name": "ENABLE_PJRT_COMPATIBILITY", "value": "true"},
        {"name": "LIBTPU_INIT_ARGS", "value": libtpu_init_args(generation, slices > 1, dcn_nics)},
    ]
    if slices > 1:
        env.append({"name": "MEGASCALE_PORT", "value": MEGASCALE_PORT})
    return env
