"""A run stack's view of its cluster stack: the cluster's exports, read with a Pulumi StackReference.

The run registers no network, cluster, system pool or controller; what it needs of them (the cluster's name and
location, a kubeconfig, the node service account, the goodput log role every run binds to) comes from the
cluster stack's outputs (Pulumi "Stack references", https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences).
The engine reads those outputs from the cluster stack's state at `pulumi preview` and `pulumi up` alike.

The run's own config names its project, zone and cluster (its plan, names and dashboard need them before
anything registers); the cluster stack's outputs must agree, and a run whose config does not is stopped before
any of its resources that need the cluster is created (every one of them waits on `name`).
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.config import NAMESPACE, StackConfig

# The outputs of a cluster stack a run reads (and `python -m preview.runs` shows).
CLUSTER_NAME, LOCATION, PROJECT, KUBECONFIG = "clusterName", "location", "project", "kubeconfig"
NODE_ACCOUNT, GOODPUT_ROLE, CLUSTER_QUEUE = "nodeServiceAccount", "goodputReaderRole", "clusterQueue"
RUN_EXPORTS = (CLUSTER_NAME, LOCATION, PROJECT, KUBECONFIG, NODE_ACCOUNT, GOODPUT_ROLE, CLUSTER_QUEUE)


def mismatches(config: StackConfig, cluster_name: str, project: str, location: str) -> list[str]:
    """What the run's config says of its cluster that the cluster stack's outputs contradict, one line each."""
    stack = config.stack.cluster_stack
    found = [("clusterName", config.cluster.name, cluster_name), ("project", config.gcp.project, project),
             ("zone", config.gcp.zone, location)]
    return [f"{NAMESPACE}:{key}={mine!r} is not valid; allowed: {theirs!r}, what cluster stack {stack} exports"
            for key, mine, theirs in found if mine != theirs]


@dataclass(frozen=True)
class SharedNetwork:
    """The cluster's network as a run's slice pools see it: runs on a shared cluster attach no DCN VPCs
    (infra/config/stack_role.py refuses dcn on a cluster stack)."""
    dcn: tuple = ()


class ClusterRef:
    """The cluster stack's outputs, duck-typed where a run's components take the cluster (`name`, `location`)."""

    def __init__(self, config: StackConfig):
        self.reference = pulumi.StackReference("cluster-stack", stack_name=config.stack.cluster_stack)
        facts = pulumi.Output.all(*(self.reference.require_output(key) for key in (CLUSTER_NAME, PROJECT, LOCATION)))
        self.name: pulumi.Output[str] = facts.apply(lambda values: _agreed(config, *values))
        # Standard clusters are zonal (a cluster stack is never Autopilot), and `name` has checked the zone.
        self.location = config.gcp.zone
        # A secret in the cluster stack, so a secret here (StackReference keeps an output's secrecy).
        self.kubeconfig = pulumi.Output.all(self.name, self.reference.require_output(KUBECONFIG)).apply(
            lambda values: values[1])
        self.node_service_account: pulumi.Output[str] = self.reference.require_output(NODE_ACCOUNT)
        self.goodput_reader_role: pulumi.Output[str] = self.reference.require_output(GOODPUT_ROLE)
        self.network = SharedNetwork()


def _agreed(config: StackConfig, cluster_name: str, project: str, location: str) -> str:
    problems = mismatches(config, cluster_name, project, location)
    if problems:
        raise pulumi.RunError("invalid stack config:\n" + "\n".join(f"  {line}" for line in problems))
    return cluster_name
