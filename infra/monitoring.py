"""The stack's Cloud Monitoring dashboard: slices, TPU utilisation, pod restarts and MaxText goodput.

The dashboard's content is built by infra.dashboard (pure, tested against the Monitoring API schema); this
component only registers it and derives its console URL.
"""
from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp

from infra.component import child_options, component_type
from infra.config import StackConfig
from infra.dashboard import DashboardInputs, dashboard_console_url, dashboard_spec


def dashboard_inputs(config: StackConfig, cluster_location: str, job_name: str) -> DashboardInputs:
    """What the dashboard needs from the stack config (pure).

    job_name must be the MaxText run_name the backend launches: MaxText uses it as the goodput job name,
    which ml-goodput-measurement writes as the workload_id of every goodput series.
    """
    autopilot = config.cluster.autopilot
    return DashboardInputs(
        project=config.gcp.project,
        location=cluster_location,
        cluster_name=config.cluster.name,
        namespace=config.kubernetes.namespace,
        slices=config.tpu.slices,
        # The same physical names infra.tpu_pools gives the pools; on Autopilot GKE names them itself.
        node_pools=() if autopilot else tuple(config.names.slice_pool(i) for i in range(config.tpu.slices)),
        tpu_accelerator=config.tpu.shape.generation.accelerator_label,
        chips_per_slice=config.tpu.shape.chips,
        job_name=job_name,
    )


class TrainingDashboard(pulumi.ComponentResource):
    """One custom dashboard in the stack's project; `url` opens it in the console."""

    def __init__(self, name: str, inputs: DashboardInputs, depends_on: list[pulumi.Resource] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "TrainingDashboard"), name, None, opts)
        self.spec = dashboard_spec(inputs)
        self.dashboard = gcp.monitoring.Dashboard(
            "dashboard", project=inputs.project,
            # The builder is deterministic, so an unchanged stack serialises to the same string: no diff.
            dashboard_json=json.dumps(self.spec),
            opts=child_options(self, depends_on=depends_on or []))
        # The provider's id is the resource name projects/<number>/dashboards/<id>; the console wants the last
        # segment and the project id (dashboard_console_url takes either form). Unknown during a real preview.
        project = inputs.project
        self.url: pulumi.Output[str] = self.dashboard.id.apply(lambda name: dashboard_console_url(project, name))
        self.register_outputs({"url": self.url})
