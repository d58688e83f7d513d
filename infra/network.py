"""VPCs: the cluster's primary network, and the extra data-center-network (DCN) VPCs between slices."""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra import naming
from infra.component import child_options, component_type
from infra.config import GcpSettings, NetworkSettings


@dataclass(frozen=True)
class DcnNetwork:
    network: gcp.compute.Network
    subnet: gcp.compute.Subnetwork


class ClusterNetwork(pulumi.ComponentResource):
    """Primary VPC + node subnet with pod/service secondary ranges, Cloud NAT for private nodes, and,
    when `dcn` is on, one extra VPC per DCN subnet.

    Why the allow-internal firewall on each DCN VPC: a new VPC has only the implied deny-ingress rule
    (VPC firewall docs, "implied rules"), and GKE creates its own firewall rules on the cluster's primary
    network only, never on additional node networks. Without the rule, slice-to-slice traffic over the
    extra NICs is dropped.
    """

    def __init__(self, name: str, gcp_settings: GcpSettings, net: NetworkSettings, names: naming.Names,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "ClusterNetwork"), name, None, opts)
        project, region = gcp_settings.project, gcp_settings.region

        def options(**kwargs) -> pulumi.ResourceOptions:
            return child_options(self, depends_on=depends_on, **kwargs)

        # Do not rely on a `default` network: many organisations delete it.
        self.network = gcp.compute.Network(
            "primary", name=names.network, project=project, auto_create_subnetworks=False,
            routing_mode="REGIONAL", opts=options())
        self.subnet = gcp.compute.Subnetwork(
            "nodes", name=names.subnet, project=project, region=region, network=self.network.id,
            ip_cidr_range=net.node_cidr, private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=names.pods_range, ip_cidr_range=net.pod_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=names.services_range,
                                                           ip_cidr_range=net.service_cidr),
            ],
            opts=options())
        # Nodes have no public IPs; NAT lets them pull public images (Ray, Pathways) and reach PyPI.
        self.router = gcp.compute.Router(
            "nat-router", name=f"{names.network}-router", project=project, region=region, network=self.network.id,
            opts=options())
        self.nat = gcp.compute.RouterNat(
            "nat", name=f"{names.network}-nat", project=project, region=region, router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY", source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            opts=options())

        self.dcn: list[DcnNetwork] = []
        for index, cidr in enumerate(net.dcn_subnets):
            network = gcp.compute.Network(
                f"dcn-{index}", name=names.dcn_network(index), project=project, auto_create_subnetworks=False,
                mtu=net.dcn_mtu, routing_mode="REGIONAL", opts=options())
            subnet = gcp.compute.Subnetwork(
                f"dcn-{index}", name=names.dcn_subnet(index), project=project, region=region, network=network.id,
                ip_cidr_range=cidr, opts=options())
            gcp.compute.Firewall(
                f"dcn-{index}-allow-internal", name=names.dcn_firewall(index), project=project, network=network.id,
                direction="INGRESS", source_ranges=[cidr],
                allows=[gcp.compute.FirewallAllowArgs(protocol=protocol) for protocol in ("tcp", "udp", "icmp")],
                description="Slice-to-slice DCN traffic between TPU hosts (new VPCs deny ingress by default).",
                opts=options())
            self.dcn.append(DcnNetwork(network, subnet))

        self.register_outputs({
            "network": self.network.name,
            "subnet": self.subnet.name,
            "dcnNetworks": [d.network.name for d in self.dcn],
        })
