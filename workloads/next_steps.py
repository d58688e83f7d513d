"""What to run after `pulumi up`: the `nextSteps` and `watchCommand` exports and the follow-the-job commands
(pure strings).

`pulumi stack output nextSteps` prints the commands in the order a user needs them, each with a shell comment
saying what it shows, so the output can be read or pasted into a shell as it is.
"""
from __future__ import annotations

import shlex
from typing import Mapping, Sequence

FOLLOW_LOG = "logsFollowCommand"
WHY_PENDING = ("whyPendingCommand", "pods Pending? why: FailedScaleUp names quota or capacity")
RUN_PODS = ("runPodsCommand", "the run's pods and the nodes they run on (Pending until their slice is up)")
TENSORBOARD = ("tensorboardCommand", "loss, step time, tokens/s (needs: pip install tensorboard gcsfs)")
SMOKE_RESULT = ("smokeResultCommand", "the multislice smoke test's verdict")
RELAUNCH = ("relaunchCommand", "run it again after it gave up waiting or failed: resumes from its checkpoint")
# Events that say why a pod is Pending: the scheduler's FailedScheduling, and the cluster autoscaler's
# NotTriggerScaleUp / FailedScaleUp / TriggeredScaleUp on the pod (GKE "Troubleshoot the cluster autoscaler not
# scaling up", https://cloud.google.com/kubernetes-engine/docs/troubleshooting/cluster-autoscaler-scale-up; a TPU
# pool without Compute Engine TPU quota shows FailedScaleUp with a quota error).
PENDING_REASONS = ("FailedScheduling", "NotTriggerScaleUp", "FailedScaleUp", "TriggeredScaleUp")
# KubeRay creates the RayCluster's token Secret labelled ray.io/cluster=<RayCluster name>, key auth_token
# (ray-project/kuberay ray-operator/controllers/ray/raycluster_controller.go createAuthSecret, v1.5.1 and later); the
# RayJob names its RayCluster in status.rayClusterName. Ray's CLI sends RAY_AUTH_TOKEN when RAY_AUTH_MODE=token
# (https://docs.ray.io/en/latest/ray-security/token-auth.html).
_RAY_TOKEN_SECRET_KEY = "auth_token"


def ray_token_command(namespace: str, ray_job: str) -> str:
    """Prints the token of the RayCluster the RayJob runs on."""
    cluster = f"$(kubectl get rayjob -n {namespace} {ray_job} -o jsonpath='{{.status.rayClusterName}}')"
    return (f"kubectl get secret -n {namespace} -l ray.io/cluster={cluster} "
            f"-o jsonpath='{{.items[0].data.{_RAY_TOKEN_SECRET_KEY}}}' | base64 -d")


def with_ray_token(command: str, namespace: str, ray_job: str) -> str:
    """`command` (a `ray` CLI call) run with the cluster's token."""
    return f'RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$({ray_token_command(namespace, ray_job)})" {command}'


def relaunch_command(stack: str, urn: str) -> str:
    """Replaces the training job's object, and only it, with the same spec: a job that gave up waiting for
    capacity, was deactivated by Kueue or failed is not created again by a plain `pulumi up` (nothing changed in
    its spec). The new job keeps the run name, so it resumes from the run's last checkpoint (docs/deploying.md
    "Resume"). The job's object is replaced with delete_before_replace (the old one goes first).

    `--target-replace`, not `--replace`: `pulumi up --replace URN` replaces that resource *and* applies every other
    pending change of the stack (a config edit, a new image); `--target-replace URN` is "shorthand for
    --target <URN> --replace <URN>" and "restricts the operation to the named resource" (Pulumi docs, "Targeted
    updates", https://www.pulumi.com/docs/iac/guides/basics/targeted-updates/)."""
    return f"pulumi up --stack {shlex.quote(stack)} --target-replace {shlex.quote(urn)}"


def why_pending_command(namespace: str) -> str:
    """The events that say why the namespace's pods are Pending (quota, capacity, scheduling)."""
    return (f"kubectl get events -n {namespace} --field-selector involvedObject.kind=Pod "
            f"--sort-by=.lastTimestamp | grep -E '{'|'.join(PENDING_REASONS)}'")


def run_pods_command(namespace: str, run_label: str, run_name: str) -> str:
    """Every pod of the run (workloads/common.py RUN_LABEL), with its node."""
    return f"kubectl get pods -n {namespace} -l {run_label}={run_name} -o wide"


def watch_command(exports: Mapping[str, str]) -> str:
    """One command that follows the training job (its driver's log) until interrupted; it has no quotes or pipes,
    so `$(pulumi stack output watchCommand)` runs it as it is."""
    return exports["logsFollowCommand"]


def next_steps(backend_steps: Sequence[tuple[str, str]], get_credentials: str, exports: Mapping[str, str],
               dashboard_url: str) -> str:
    """The commands to run after `pulumi up`, each below a comment saying what it shows: the credentials, then the
    backend's (export key, what it shows) steps that the stack exports."""
    steps = [(get_credentials, "point kubectl at the new cluster (needs gke-gcloud-auth-plugin)")]
    steps += [(exports[key], note) for key, note in backend_steps if key in exports]
    lines = [f"# {note}\n{command}" for command, note in steps]
    lines.append(f"# Cloud Monitoring dashboard (slices, TPU use, goodput): {dashboard_url}")
    return "\n".join(lines)
