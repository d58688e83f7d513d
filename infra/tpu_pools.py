"""One multi-host TPU node pool per slice."""
from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from core.node_sizing import threads_per_core
from infra.cluster import GkeCluster, image_streaming, node_security
from infra.component import child_options, component_type
from infra.config import Capacity, StackConfig
from infra.gke_versions import NO_CHANNEL
from infra.network import ClusterNetwork

DRANET_NODE_LABEL = "cloud.google.com/gke-networking-dra-driver"
SLICE_LABEL = "tpu-multislice/slice"


def capacity_settings(config: StackConfig) -> dict:
    """node_config kwargs for the configured capacity."""
    capacity = config.tpu.capacity
    if capacity is Capacity.SPOT:
        return {"spot": True}
    if capacity is Capacity.RESERVATION:
        return {"reservation_affinity": gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name",
            values=[config.tpu.reservation_name])}
    if capacity is Capacity.FLEX_START:
        return {"flex_start": True,
                "reservation_affinity": gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                    consume_reservation_type="NO_RESERVATION")}
    return {}


def shutdown_settings(config: StackConfig) -> dict:
    """node_config kwargs for the Spot notice: the kubelet's graceful-shutdown budget, raised to 120 s (critical
    system pods keep GKE's 15 s) only when the save at the notice needs more than GKE's default 15 s for regular
    pods (core/preemption.py; infra/config/preemption.py decides it applies and adds the GKE version floor).
    The GKE API takes 0, 30 or 120 s for the total and only on Spot VMs (container v1 NodeKubeletConfig)."""
    budget = config.workload.shutdown
    if budget.node_shutdown_s is None:
        return {}
    return {"kubelet_config": gcp.container.NodePoolNodeConfigKubeletConfigArgs(
        shutdown_grace_period_seconds=budget.node_shutdown_s,
        shutdown_grace_period_critical_pods_seconds=budget.node_critical_s)}


def size_settings(config: StackConfig, index: int) -> dict:
    """Node pool kwargs for slice `index`'s size: a fixed whole slice when warm, else autoscaling 0..hosts.

    GKE creates and removes a multi-host slice's VMs as one unit ("About TPUs in GKE": multi-host TPU slice
    node pools scale atomically), so a pool that may scale holds 0 or all of its hosts and costs nothing while no
    pod asks for it. The bounds are per zone (`min/max_node_count`): GKE checks a multi-host slice against the
    per-zone maximum, and with only the total bounds that maximum is 0 and GKE refuses the pool ("Maximum node
    count 0 is not a valid size of TPU pod slice", vllm-project/ci-infra#545; Ray's "Start Google Cloud GKE
    Cluster with TPUs for KubeRay" guide creates its TPU pools with gcloud's per-zone --min-nodes 0 / --max-nodes,
    https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/gcp-gke-tpu-cluster.html). location_policy ANY: take capacity wherever the pool's zone has
    it (the flex-start and Spot recommendation; the pool has one zone). No queued provisioning: nothing here
    creates ProvisioningRequests, and without them a queued pool never gets a node (xpk never uses it for TPUs).
    A warm pool (config warmSlices; flex-start never) keeps its hosts: a fixed node count, as before autoscaling.
    No initial node count on spot/on-demand/reservation pools: the provider then creates them empty (0), and
    since the field is create-only (ForceNew in terraform-provider-google's google_container_node_pool), setting
    it on a pool created with a fixed count would replace the pool instead of turning autoscaling on.
    """
    low, high = config.tpu.pool_bounds(index)
    if low == high and config.tpu.capacity is not Capacity.FLEX_START:
        return {"node_count": high}
    autoscaling = gcp.container.NodePoolAutoscalingArgs(min_node_count=low, max_node_count=high,
                                                        location_policy="ANY")
    if config.tpu.capacity is Capacity.FLEX_START:
        return {"initial_node_count": 0, "autoscaling": autoscaling}
    return {"autoscaling": autoscaling}


class TpuSlicePools(pulumi.ComponentResource):
    """The pools depend on the cluster and the networks, never on each other, so GKE creates them in
    parallel (it serialises conflicting operations itself and the provider retries them)."""

    def __init__(self, name: str, config: StackConfig, cluster: GkeCluster, network: ClusterNetwork,
                 node_service_account: pulumi.Input[str], depends_on: list[pulumi.Resource] | None = None,
                 image_ready: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None):
        """image_ready: the workers' image's build and the nodes' read grant on it (workerEnvironment=image);
        every TPU resource here waits for them, so a failed build leaves no slice behind."""
        super().__init__(component_type("infra", "TpuSlicePools"), name, None, opts)
        shape, names = config.tpu.shape, config.names
        node_kwargs = capacity_settings(config)

        if shape.generation.uses_workload_policy:
            # TPU7x multi-host slices are shaped by a workload policy instead of tpu_topology.
            self.workload_policy = gcp.compute.ResourcePolicy(
                "slice-policy", name=names.workload_policy(shape.topology), project=config.gcp.project,
                region=config.gcp.region,
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type="HIGH_THROUGHPUT", accelerator_topology=shape.topology),
                # Needs compute.googleapis.com: after the stack's API resources, like everything that calls an API.
                opts=child_options(self, depends_on=[*(depends_on or []), *(image_ready or [])]))
            placement = gcp.container.NodePoolPlacementPolicyArgs(
                type="COMPACT", policy_name=self.workload_policy.name)
        else:
            self.workload_policy = None
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=shape.topology)

        additional_networks = [
            gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                network=dcn.network.name, subnetwork=dcn.subnet.name)
            for dcn in network.dcn
        ]
        # SMT off only where it can be cited (core/node_sizing.py); pod requests are sized from the same fact.
        smt = threads_per_core(shape.machine)
        advanced_machine_features = (gcp.container.NodePoolNodeConfigAdvancedMachineFeaturesArgs(
            threads_per_core=smt) if smt else None)
        self.pools: list[gcp.container.NodePool] = []
        for index in range(config.tpu.slices):
            # A run on a shared cluster labels its pools for its own pods (infra/config/stack_role.py).
            labels = {SLICE_LABEL: str(index), **config.stack.pool_labels}
            if config.network.dranet:
                labels[DRANET_NODE_LABEL] = "true"
            self.pools.append(gcp.container.NodePool(
                f"slice-{index}",
                name=names.slice_pool(index),
                project=config.gcp.project,
                cluster=cluster.name,
                location=cluster.location,
                node_locations=[config.gcp.zone],
                placement_policy=placement,
                network_config=gcp.container.NodePoolNetworkConfigArgs(
                    additional_node_network_configs=additional_networks) if additional_networks else None,
                node_config=gcp.container.NodePoolNodeConfigArgs(
                    machine_type=shape.machine.name,
                    labels=labels,
                    gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                    gcfs_config=image_streaming(config),
                    advanced_machine_features=advanced_machine_features,
                    **node_security(node_service_account),
                    **node_kwargs,
                    **shutdown_settings(config),
                ),
                # Flex-start pools must not auto-repair (cluster-toolkit gke-node-pool precondition "enable_flex_start
                # needs node auto_repair set to false"; xpk adds --no-enable-autorepair).
                management=gcp.container.NodePoolManagementArgs(
                    auto_repair=config.tpu.capacity is not Capacity.FLEX_START,
                    # In a release channel GKE requires auto-upgrade, and the cluster's maintenance exclusion keeps
                    # it from recreating a slice (infra/cluster.py); without a channel it is simply off.
                    auto_upgrade=config.cluster.release_channel != NO_CHANNEL),
                **size_settings(config, index),
                opts=child_options(self, depends_on=list(image_ready or [])),
            ))
        self.names = [pool.name for pool in self.pools]
        self.register_outputs({"nodePools": self.names})
