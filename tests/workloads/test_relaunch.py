"""A run that gave up waiting for capacity (or failed) can be started again with one exported command.

Nothing starts it by itself: KubeRay v1.7.0 fails a RayJob still waiting after preRunningDeadlineSeconds
(rayjob_controller.go checkPreRunningDeadlineAndUpdateStatusIfNeeded) and, with backoffLimit 0, never retries it;
Kueue v0.19.2 deactivates a Workload after backoffLimitCount requeues (configuration_types.go); a failed JobSet
stays failed. And a plain `pulumi up` changes nothing, since the job's spec did not change. `pulumi up
--target-replace URN` (Pulumi docs, "Targeted updates": "Shorthand for --target <URN> --replace <URN>. Restricts
the operation to the named resource and forces its replacement") deletes and creates that one object with the same
spec and nothing else; `--replace URN` alone would also apply every other pending change of the stack. The same run
name means the new job resumes from the run's last checkpoint.
"""
from __future__ import annotations

import shlex

import pytest

from tests.conftest import STACKS_WITH_A_RUN, build_stack, committed_stack_run
from workloads.common import RUN_LABEL

TRAINING_JOB = {"rayjob": "kubernetes:ray.io/v1:RayJob", "jobset": "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",
                "pathways": "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"}


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)     # a run stack on a shared cluster too
def test_the_relaunch_command_replaces_exactly_the_training_job(stack):
    run = committed_stack_run(stack)
    command = run.outputs.get("relaunchCommand")
    assert command, f"{stack}: no relaunchCommand export"
    argv = shlex.split(command)
    # Restricted to the job: no other pending change of the stack is applied with it.
    assert argv[:3] == ["pulumi", "up", "--stack"] and argv[3] == stack and argv[4] == "--target-replace"
    assert "--replace" not in argv and "--target" not in argv
    [urn] = argv[5:]
    job = run.by_urn(urn)                          # a URN the program really registers
    jobs = [r for r in run.resources if r.type in set(TRAINING_JOB.values())]
    assert job in jobs and len(jobs) == 1, [r.name for r in jobs]
    # Deleted before it is created again: the old job must not hold the TPU hosts the new one asks for.
    assert job.delete_before_replace
    # The same run name: the replaced job resumes from the run's checkpoints.
    config = build_stack(stack)
    assert job.inputs["metadata"]["labels"][RUN_LABEL] == config.workload.run.run_name
    assert command in run.outputs["nextSteps"]
