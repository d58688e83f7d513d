"""A run stack's view of its cluster stack: the cluster's exports, read with a Pulumi StackReference.

The run registers no network, cluster, system pool or controller; what it needs of them (the cluster's name and
location, a kubeconfig, the node service account, the goodput log role every run binds to) comes from the
cluster stack's outputs (Pulumi "Stack references", https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences).
The engine reads those outputs from the cluster stack's state at `pulumi preview` and `pulumi up` alike.

The run's project, zone and cluster name are needed before anything registers (its plan, names and dashboard
are made from them), so config build reads them first with read_outputs, the same outputs through the engine's
own invoke, and the run's config need not repeat them (infra/config/stack_role.py with_cluster_exports).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from infra.config import StackConfig

# The outputs of a cluster stack a run reads (and `python -m preview.runs` shows).
CLUSTER_NAME, LOCATION, PROJECT, KUBECONFIG = "clusterName", "location", "project", "kubeconfig"
NODE_ACCOUNT, GOODPUT_ROLE, CLUSTER_QUEUE = "nodeServiceAccount", "goodputReaderRole", "clusterQueue"
RUN_EXPORTS = (CLUSTER_NAME, LOCATION, PROJECT, KUBECONFIG, NODE_ACCOUNT, GOODPUT_ROLE, CLUSTER_QUEUE)
# The engine's built-in function a StackReference's read uses: it answers {name, outputs, secretOutputNames} for
# a fully qualified stack name, and fails for a stack that does not exist (pulumi/pulumi
# pkg/resource/deploy/builtins.go, builtinProvider.Invoke and readStackReference; the "pulumi" package's
# functions go to that built-in provider, pkg/resource/deploy/providers/registry.go loadProvider).
READ_STACK_OUTPUTS = "pulumi:pulumi:readStackOutputs"


def read_outputs(stack_name: str) -> dict[str, Any]:
    """A stack's outputs, now, while the program runs and before it registers anything (Pulumi's Python `invoke`
    waits for its answer, pulumi/runtime/invoke.py). Raises LookupError with the engine's reason."""
    try:
        result = pulumi.runtime.invoke(READ_STACK_OUTPUTS, {"name": stack_name})
    except Exception as error:  # noqa: BLE001 (the engine's failure, said in config build's one line)
        raise LookupError(str(error).splitlines()[0] if str(error) else type(error).__name__) from None
    outputs = (result.value or {}).get("outputs")
    if not isinstance(outputs, dict) or not outputs:
        raise LookupError("it has no outputs")
    return outputs


@dataclass(frozen=True)
class SharedNetwork:
    """The cluster's network as a run's slice pools see it: runs on a shared cluster attach no DCN VPCs
    (infra/config/stack_role.py refuses dcn on a cluster stack)."""
    dcn: tuple = ()


class ClusterRef:
    """The cluster stack's outputs, duck-typed where a run's components take the cluster (`name`, `location`)."""

    def __init__(self, config: StackConfig):
        self.reference = pulumi.StackReference("cluster-stack", stack_name=config.stack.cluster_stack)
        # Config build took the cluster's name and zone from these very outputs (read_outputs).
        self.name: pulumi.Output[str] = self.reference.require_output(CLUSTER_NAME)
        # Standard clusters are zonal (a cluster stack is never Autopilot): the zone config build read.
        self.location = config.gcp.zone
        # A secret in the cluster stack, so a secret here (StackReference keeps an output's secrecy).
        self.kubeconfig = self.reference.require_output(KUBECONFIG)
        self.node_service_account: pulumi.Output[str] = self.reference.require_output(NODE_ACCOUNT)
        self.goodput_reader_role: pulumi.Output[str] = self.reference.require_output(GOODPUT_ROLE)
        self.network = SharedNetwork()
