"""`pulumi stack output nextSteps` / `watchCommand`: every committed stack says what to run after `pulumi up`,
in order, and each line is a command of a tool the deploy guide (docs/deploying.md) lists."""
from __future__ import annotations

import shlex

import pytest

from tests.conftest import STACKS_WITH_A_RUN, committed_stack_run

# The tools docs/deploying.md lists under prerequisites.
GUIDE_TOOLS = {"gcloud", "kubectl", "tensorboard", "ray", "pulumi"}
STATUS_KEY = {"rayjob": "rayJobStatusCommand", "jobset": "jobsetStatusCommand", "pathways": "pathwaysStatusCommand"}


def _backend(outputs: dict) -> str:
    return next(backend for backend, key in STATUS_KEY.items() if key in outputs)


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)
def test_next_steps_start_with_credentials_then_the_jobs_state(stack):
    outputs = committed_stack_run(stack).outputs
    lines = outputs["nextSteps"].splitlines()
    commands = [line for line in lines if line and not line.startswith("#")]
    notes = [line for line in lines if line.startswith("#")]
    assert commands[0] == outputs["getCredentialsCommand"]
    assert commands[1:].count(outputs[STATUS_KEY[_backend(outputs)]]) == 1
    assert len(notes) == len(commands) + 1            # one note per command, then the dashboard
    assert outputs["dashboardUrl"] in notes[-1]
    for command in commands:
        first = shlex.split(command.split(";")[0].split("|")[0])[0]
        assert first in GUIDE_TOOLS, command


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)
def test_watch_command_follows_the_drivers_log(stack):
    """`$(pulumi stack output watchCommand)` word-splits the value: no quotes, pipes or substitutions in it."""
    outputs = committed_stack_run(stack).outputs
    watch = outputs["watchCommand"]
    assert watch == outputs["logsFollowCommand"]
    assert shlex.split(watch)[:2] == ["kubectl", "logs"] and " -f " in watch
    assert not set("'\"|$;") & set(watch)
    assert "watchCommand" not in committed_stack_run(stack).secret_outputs


# Where each backend's training log is, as its controller names things:
# - Ray: KubeRay's RayJob creates its submitter Job under the RayJob's own name (ray-project/kuberay
#   ray-operator/controllers/ray/rayjob_controller.go createNewK8sJob, `Name: rayJobInstance.Name`), and the
#   submitter runs `ray job submit`, which streams the driver's log.
# - JobSet: pods carry jobset.sigs.k8s.io/jobset-name and job-index (kubernetes-sigs/jobset pkg/controllers
#   jobset_controller.go labelAndAnnotateObject) and the Job's batch.kubernetes.io/job-completion-index.
# - Pathways: MaxText runs in the head's maxtext container (workloads/pathways).
LOG_TARGET = {"rayjob": lambda o: f"job/{o['rayJobName']}",
              "jobset": lambda o: (f"jobset.sigs.k8s.io/jobset-name={o['jobsetName']},jobset.sigs.k8s.io/job-index=0,"
                                   "batch.kubernetes.io/job-completion-index=0"),
              "pathways": lambda o: "replicatedjob-name=pathways-head -c maxtext"}


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)
def test_next_steps_follow_the_log_and_say_why_pods_are_pending(stack):
    outputs = committed_stack_run(stack).outputs
    backend = _backend(outputs)
    steps = outputs["nextSteps"].splitlines()
    logs, pending = outputs["logsFollowCommand"], outputs["whyPendingCommand"]
    assert logs in steps and pending in steps
    assert LOG_TARGET[backend](outputs) in logs and " -f " in logs
    # The cluster autoscaler reports a scale-up it could not do (no quota, no capacity) as pod events.
    for reason in ("FailedScaleUp", "NotTriggerScaleUp", "FailedScheduling"):
        assert reason in pending
    assert pending.startswith(f"kubectl get events -n {outputs['namespace']} ")


def test_the_ray_token_is_exported_and_used_by_the_ray_cli():
    """KubeRay keeps a token-auth RayCluster's token in a Secret labelled ray.io/cluster=<RayCluster>, key
    auth_token (ray-project/kuberay ray-operator/controllers/ray/raycluster_controller.go createAuthSecret,
    utils/constant.go RAY_AUTH_TOKEN_SECRET_KEY); the RayJob names its RayCluster in status.rayClusterName. Ray's CLI
    sends RAY_AUTH_TOKEN when RAY_AUTH_MODE=token (https://docs.ray.io/en/latest/ray-security/token-auth.html)."""
    outputs = committed_stack_run("dev").outputs
    token = outputs["rayAuthTokenCommand"]
    ns, job = outputs["namespace"], outputs["rayJobName"]
    assert token == (f"kubectl get secret -n {ns} -l ray.io/cluster=$(kubectl get rayjob -n {ns} {job} "
                     "-o jsonpath='{.status.rayClusterName}') -o jsonpath='{.items[0].data.auth_token}' | base64 -d")
    assert token in outputs["nextSteps"].splitlines()
    assert outputs["rayJobSubmit"].startswith(f'RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$({token})" ray job submit ')
    assert "rayAuthTokenCommand" not in committed_stack_run("jobset").outputs
