"""The GKE cluster (Standard or Autopilot) and, in Standard, its CPU pool for system pods and the Ray head."""
from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp

from infra.component import child_options, component_type
from infra.config import StackConfig
from infra.gke_versions import NO_CHANNEL
from infra.network import ClusterNetwork

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


# No node upgrade, and no minor upgrade, while the exclusion lasts: a node upgrade recreates the VMs of a TPU slice
# and ends every run on it. NO_MINOR_OR_NODE_UPGRADES still lets GKE patch the control plane; UNTIL_END_OF_SUPPORT
# ends it when the cluster's minor version leaves support, the longest GKE allows for this scope (GKE "Maintenance
# windows and exclusions", https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions;
# terraform-provider-google resource_container_cluster.go `exclusion_options`). The scope needs a release channel.
# The start is fixed so the policy never diffs; GKE takes a start in the past (terraform-provider-google's acceptance
# test TestAccContainerCluster_withMaintenanceExclusionOptions_untilEndOfSupport creates this scope with a 2019
# start; listed as an assumption all the same). GKE still applies security-critical upgrades regardless.
NODE_UPGRADE_EXCLUSION = "tpu-slices-no-node-upgrades"
EXCLUSION_START = "2026-01-01T00:00:00Z"
# A maintenance policy needs a window (the provider's ExactlyOneOf); control-plane patches go here, 03:00 UTC.
MAINTENANCE_WINDOW_START = "03:00"


def maintenance_policy(release_channel: str) -> gcp.container.ClusterMaintenancePolicyArgs | None:
    if release_channel == NO_CHANNEL:
        return None   # no channel: the TPU pools turn node auto-upgrade off instead (infra/tpu_pools.py)
    return gcp.container.ClusterMaintenancePolicyArgs(
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=MAINTENANCE_WINDOW_START),
        maintenance_exclusions=[gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
            exclusion_name=NODE_UPGRADE_EXCLUSION, start_time=EXCLUSION_START,
            exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                scope="NO_MINOR_OR_NODE_UPGRADES", end_time_behavior="UNTIL_END_OF_SUPPORT"))])


def control_plane_access(authorized_networks: tuple[str, ...]) -> dict:
    """The control plane is reached through GKE's DNS-based endpoint: every request carries a Google identity that
    IAM checks (container.clusters.connect), from wherever `pulumi up` runs, with no network allow-list to keep
    current (GKE "About network isolation", DNS-based endpoint; `gcloud container clusters get-credentials
    --dns-endpoint`). The public IP endpoint exists only when the user names the ranges allowed to reach it (CIS GKE
    Benchmark 5.6.3 "Ensure Control Plane Authorized Networks is Enabled", 5.6.4 "Ensure clusters are created with
    Private Endpoint Enabled and Public Access Disabled"; cluster-toolkit always sets master_authorized_networks_config).
    Nodes keep using the private IP endpoint."""
    return dict(
        control_plane_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigArgs(
            dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
                allow_external_traffic=True)),
        master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
            cidr_blocks=[gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=cidr, display_name=f"controlPlaneAuthorizedNetworks[{index}]")
                for index, cidr in enumerate(authorized_networks)]),
        private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
            enable_private_nodes=True, enable_private_endpoint=not authorized_networks),
    )


def kubeconfig(cluster_name: str, dns_endpoint: str) -> str:
    """Kubeconfig (JSON, which every kubeconfig reader accepts) for the DNS-based endpoint: it serves a publicly
    trusted certificate, so no CA data, and authenticates with gke-gcloud-auth-plugin, so no credential is stored."""
    context = f"gke_{cluster_name}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": f"https://{dns_endpoint}"}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [{"name": context, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }}}],
    }
    return json.dumps(document, indent=2)


def node_security(service_account: pulumi.Input[str]) -> dict:
    """Node settings every pool shares: own service account, GKE metadata server (Workload Identity),
    shielded VMs."""
    return dict(
        service_account=service_account,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_integrity_monitoring=True),
    )


def image_streaming(config: StackConfig) -> gcp.container.NodePoolNodeConfigGcfsConfigArgs | None:
    """With the workers' image, GKE Image streaming: a cold node starts the container while the multi-GB image
    streams, instead of after the whole pull. Needs the Container File System API (infra/services.py), the
    Container-Optimized OS containerd image (GKE's default), an Artifact Registry image and, on private nodes,
    Private Google Access on the node subnet (infra/network.py sets it), and a custom node service account needs
    roles/serviceusage.serviceUsageConsumer on the project (infra/identity.py grants it with the image): "Use
    Image streaming to pull container images", https://cloud.google.com/kubernetes-engine/docs/how-to/
    image-streaming. On every pool that runs the image: the TPU slices and the system pool (the Ray head and the
    JobSet submitter run it too)."""
    if config.worker_image is None:
        return None
    return gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=True)


class GkeCluster(pulumi.ComponentResource):
    def __init__(self, name: str, config: StackConfig, network: ClusterNetwork, node_service_account: pulumi.Input[str],
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "GkeCluster"), name, None, opts)
        settings, names = config.cluster, config.names
        # Autopilot clusters are regional; Standard TPU clusters are zonal so every slice pool sits in
        # the TPU zone.
        self.location = config.gcp.region if settings.autopilot else config.gcp.zone
        common = dict(
            name=settings.name,
            project=config.gcp.project,
            location=self.location,
            network=network.network.id,
            subnetwork=network.subnet.id,
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=names.pods_range,
                services_secondary_range_name=names.services_range),
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=settings.release_channel),
            # Unset: GKE creates the cluster at the release channel's default (the provider sends it as the
            # initial version; a floor would ask for an old patch GKE no longer offers).
            min_master_version=settings.gke_version,
            deletion_protection=settings.deletion_protection,
            # Nodes get no public IP; the control plane is reached through its DNS endpoint with IAM.
            **control_plane_access(settings.authorized_networks),
            maintenance_policy=maintenance_policy(settings.release_channel),
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                ray_operator_configs=[gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(
                    enabled=True,
                    ray_cluster_logging_config=gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterLoggingConfigArgs(enabled=True),
                    ray_cluster_monitoring_config=gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterMonitoringConfigArgs(enabled=True),
                )],
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
            ),
            resource_labels={"app": "tpu-multislice"},
        )
        if settings.autopilot:
            # Autopilot always runs Dataplane V2 and Workload Identity; it manages nodes itself.
            self.cluster = gcp.container.Cluster(
                "cluster", enable_autopilot=True, **common,
                # Autopilot nodes run as the Compute Engine default account unless told otherwise; host-network
                # pods act as the node account, so it must be ours (GKE "Autopilot: custom service account",
                # pulumi-gcp ClusterClusterAutoscalingAutoProvisioningDefaultsArgs).
                cluster_autoscaling=gcp.container.ClusterClusterAutoscalingArgs(
                    auto_provisioning_defaults=gcp.container.ClusterClusterAutoscalingAutoProvisioningDefaultsArgs(
                        service_account=node_service_account, oauth_scopes=[CLOUD_PLATFORM_SCOPE])),
                opts=child_options(self, depends_on=depends_on))
            self.system_pool = None
        else:
            self.cluster = gcp.container.Cluster(
                "cluster",
                **common,
                datapath_provider="ADVANCED_DATAPATH",
                workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                    workload_pool=f"{config.gcp.project}.svc.id.goog"),
                # Additional node networks (the DCN VPCs) and DRANET need multi-networking.
                enable_multi_networking=config.network.dcn or None,
                # Node pools are managed separately; the bootstrap pool is removed once the cluster is up,
                # and while it lives it uses our node account, not the Compute Engine default one.
                remove_default_node_pool=True,
                initial_node_count=1,
                node_config=gcp.container.ClusterNodeConfigArgs(
                    service_account=node_service_account, oauth_scopes=[CLOUD_PLATFORM_SCOPE]),
                opts=child_options(self, depends_on=depends_on,
                                   # GKE changes node_config only through pools; a diff here would
                                   # needlessly replace the cluster.
                                   ignore_changes=["nodeConfig"]),
            )
            self.system_pool = gcp.container.NodePool(
                "system",
                name=names.system_pool,
                project=config.gcp.project,
                cluster=self.cluster.name,
                location=self.location,
                node_count=settings.system_pool_nodes,
                node_config=gcp.container.NodePoolNodeConfigArgs(
                    machine_type=settings.system_pool_machine_type,
                    labels={"tpu-multislice/pool": "system"},
                    gcfs_config=image_streaming(config),
                    **node_security(node_service_account),
                ),
                management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
                opts=child_options(self),
            )
        self.name = self.cluster.name
        self.endpoint = self.cluster.control_plane_endpoints_config.apply(
            lambda config: config.dns_endpoint_config.endpoint)
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(self.cluster.name, self.endpoint).apply(
            lambda parts: kubeconfig(*parts)))
        self.register_outputs({"name": self.name, "endpoint": self.endpoint, "location": self.location})
