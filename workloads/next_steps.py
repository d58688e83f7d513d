"""What to run after `pulumi up`: the `nextSteps` and `watchCommand` exports and the follow-the-job commands
(pure strings).

`pulumi stack output nextSteps` prints the commands in the order a user needs them, each with a shell comment
saying what it shows, so the output can be read or pasted into a shell as it is.
"""
from __future__ import annotations

from typing import Mapping

# Per backend: the export keys worth running after the credentials, in order, with what each shows.
_STEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "rayjob": (
        ("rayJobStatusCommand", "the job's state (add --watch to follow it)"),
        ("logsFollowCommand", "follow the training driver's log (the submitter streams it)"),
        ("whyPendingCommand", "pods Pending? why: FailedScaleUp names quota or capacity"),
        ("smokeResultCommand", "the multislice smoke test's verdict"),
        ("rayAuthTokenCommand", "the Ray token: the dashboard asks for it, `ray job` reads it"),
        ("rayDashboardPortForward", "then open http://localhost:8265 (Ray dashboard, TPU charts per node)"),
        ("tensorboardCommand", "loss, step time, tokens/s (needs: pip install tensorboard gcsfs)"),
    ),
    "jobset": (
        ("kueueWorkloadsCommand", "is the JobSet admitted by Kueue?"),
        ("jobsetStatusCommand", "the JobSet's state (add --watch to follow it)"),
        ("logsFollowCommand", "follow the training log (slice 0, host 0)"),
        ("whyPendingCommand", "pods Pending? why: FailedScaleUp names quota or capacity"),
        ("smokeResultCommand", "the multislice smoke test's verdict"),
        ("jobsetLogsCommand", "the training pods' last lines"),
        ("tensorboardCommand", "loss, step time, tokens/s (needs: pip install tensorboard gcsfs)"),
    ),
    "pathways": (
        ("pathwaysStatusCommand", "the JobSet's state (add --watch to follow it)"),
        ("logsFollowCommand", "follow MaxText's log on the Pathways head, elastic recoveries included"),
        ("whyPendingCommand", "pods Pending? why: FailedScaleUp names quota or capacity"),
    ),
}
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


def follow_commands(backend: str, namespace: str, exports: Mapping[str, str]) -> dict[str, str]:
    """The exports that follow the job: its driver's log, why its pods are Pending, and on Ray the token."""
    ns = namespace
    if backend == "rayjob":
        # The submitter Job carries the RayJob's name and streams the driver's log (`ray job submit`).
        job = exports["rayJobName"]
        logs = f"kubectl logs -n {ns} -f job/{job}"
    elif backend == "jobset":
        name = exports["jobsetName"]
        logs = (f"kubectl logs -n {ns} -f -l jobset.sigs.k8s.io/jobset-name={name},"
                "jobset.sigs.k8s.io/job-index=0,batch.kubernetes.io/job-completion-index=0")
    else:
        logs = exports["pathwaysLogsCommand"]
    commands = {
        "logsFollowCommand": logs,
        "whyPendingCommand": (f"kubectl get events -n {ns} --field-selector involvedObject.kind=Pod "
                              f"--sort-by=.lastTimestamp | grep -E '{'|'.join(PENDING_REASONS)}'"),
    }
    if backend == "rayjob":
        commands["rayAuthTokenCommand"] = ray_token_command(ns, exports["rayJobName"])
    return commands


def watch_command(backend: str, exports: Mapping[str, str]) -> str:
    """One command that follows the training job (its driver's log) until interrupted; it has no quotes or pipes,
    so `$(pulumi stack output watchCommand)` runs it as it is."""
    return exports["logsFollowCommand"]


def next_steps(backend: str, get_credentials: str, exports: Mapping[str, str], dashboard_url: str) -> str:
    """The commands to run after `pulumi up`, each below a comment saying what it shows."""
    steps = [(get_credentials, "point kubectl at the new cluster (needs gke-gcloud-auth-plugin)")]
    steps += [(exports[key], note) for key, note in _STEPS[backend] if key in exports]
    lines = [f"# {note}\n{command}" for command, note in steps]
    lines.append(f"# Cloud Monitoring dashboard (slices, TPU use, goodput): {dashboard_url}")
    return "\n".join(lines)
