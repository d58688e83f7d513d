"""The JobSet and Kueue controllers, installed from their official Helm charts at pinned versions.

Charts are the projects' OCI charts on registry.k8s.io (JobSet's and Kueue's installation docs:
`helm install jobset oci://registry.k8s.io/jobset/charts/jobset --version 0.12.0 ...` and
`helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version=0.19.2 ...`; chart versions carry no
leading "v"). The versions match the CRDs the manifests are validated against (../shared/schemas, docs/platform-notes.md §7).
Any backend that submits JobSets through Kueue (jobset, pathways) waits on `.ready`.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.component import child_options, component_type
from infra.config import StackConfig
from workloads import kueue_config
from workloads.common import DRANET_DEVICE_CLASS


@dataclass(frozen=True)
class Chart:
    release: str
    chart: str
    version: str
    namespace: str


JOBSET_CHART = Chart("jobset", "oci://registry.k8s.io/jobset/charts/jobset", "0.12.0", "jobset-system")
KUEUE_CHART = Chart("kueue", "oci://registry.k8s.io/kueue/charts/kueue", "0.19.2", "kueue-system")


def kueue_device_classes(config: StackConfig) -> dict[str, list[str]]:
    """DeviceClasses the stack's pods claim, by the quota resource Kueue charges them to."""
    if config.network.dranet:
        return {kueue_config.DRANET_QUOTA_RESOURCE: [DRANET_DEVICE_CLASS]}
    return {}


def kueue_values(config: StackConfig) -> dict:
    """Helm values of the Kueue release (workloads/kueue_config.py): waitForPodsReady, and the DRANET mapping when
    pods claim NICs."""
    return kueue_config.chart_values(kueue_device_classes(config))


class WorkloadControllers(pulumi.ComponentResource):
    """JobSet, then Kueue (its JobSet integration needs the JobSet CRD to exist when it starts).

    Pass the cluster's Kubernetes provider in `opts.providers` and the cluster in `opts.deleted_with`: the
    releases are then deleted with the cluster instead of being uninstalled one by one on destroy.
    """

    def __init__(self, name: str, config: StackConfig, nodes_ready: list[pulumi.Resource] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("workloads", "WorkloadControllers"), name, None, opts)
        deleted_with = opts.deleted_with if opts else None
        # An atomic release whose pods cannot be scheduled times out and is rolled back: in Standard mode the
        # cluster has no node until the system pool is up (the default pool is removed), so wait for it.
        self.jobset = self._release(JOBSET_CHART, deleted_with, depends_on=list(nodes_ready or []))
        self.kueue = self._release(KUEUE_CHART, deleted_with, depends_on=[self.jobset], values=kueue_values(config))
        # Workload objects depend on both: the CRDs and the admission webhooks must be serving first.
        self.ready: list[pulumi.Resource] = [self.jobset, self.kueue]
        self.register_outputs({
            "jobsetChart": f"{JOBSET_CHART.chart}:{JOBSET_CHART.version}",
            "kueueChart": f"{KUEUE_CHART.chart}:{KUEUE_CHART.version}",
        })

    def _release(self, chart: Chart, deleted_with: pulumi.Resource | None,
                 depends_on: list[pulumi.Resource], values: dict | None = None) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
            chart.release,
            k8s.helm.v3.ReleaseArgs(
                name=chart.release,
                chart=chart.chart,
                version=chart.version,
                namespace=chart.namespace,
                create_namespace=True,
                values=values or None,
                # Wait until the controller and its webhooks are ready, or the first JobSet would be refused
                # by a webhook with no endpoints.
                skip_await=False,
                atomic=True,
            ),
            opts=child_options(self, depends_on=depends_on, deleted_with=deleted_with),
        )
