"""Where to watch the JobSet backend and read the smoke test: the stack's exports (pure strings)."""
from __future__ import annotations

from infra.config import StackConfig
from workloads import common
from workloads.jobset import spec as jobset_inputs
from workloads.smoke_exports import smoke_result_command

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The label Kueue puts on a job's Workload: the UID of the job it admits (kueue v0.19.2
# pkg/controller/constants/constants.go JobUIDLabel); the Workload's own name carries a hash.
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def kueue_resume_command(namespace: str, jobset_name: str) -> str:
    """The one command that resumes a JobSet whose Workload Kueue deactivated (spec.active=false after
    backoffLimitCount requeues, core/slice_wait.py): `spec.active` back to true (the Workload CRD's field,
    kueue v0.19.2 config/components/crd/bases/kueue.x-k8s.io_workloads.yaml, default true). Kueue cleared the
    requeue count at the deactivation, so it starts a fresh count; the JobSet resumes from its last checkpoint."""
    uid = f"$(kubectl get jobset -n {namespace} {jobset_name} -o jsonpath='{{.metadata.uid}}')"
    workload = f"$(kubectl get workloads.kueue.x-k8s.io -n {namespace} -o name -l {KUEUE_JOB_UID_LABEL}={uid})"
    return f"kubectl patch -n {namespace} {workload} --type=merge -p '{{\"spec\":{{\"active\":true}}}}'"


def jobset_exports(config: StackConfig, cluster_location: str, jobset_name: str,
                   smoke_jobset_name: str | None) -> dict[str, str]:
    ns = config.kubernetes.namespace
    run = config.workload.run.run_name
    tensorboard = common.tensorboard_directory(config, run)
    # Every pod of the run (smoke test and training JobSets, restarts, re-ups under the same run name).
    logs_query = common.container_logs_query(config, common.run_logs_condition(run))
    exports = {
        "jobsetName": jobset_name,
        "jobsetStatusCommand": f"kubectl get jobset -n {ns} {jobset_name}",
        "jobsetLogsCommand": f"kubectl logs -n {ns} -l {JOBSET_NAME_LABEL}={jobset_name} --tail=100 --prefix",
        # Slice 0, host 0: pods carry the JobSet's name and job index (jobset pkg/controllers/jobset_controller.go
        # labelAndAnnotateObject) and the Job's completion index.
        "logsFollowCommand": (f"kubectl logs -n {ns} -f -l {JOBSET_NAME_LABEL}={jobset_name},"
                              "jobset.sigs.k8s.io/job-index=0,batch.kubernetes.io/job-completion-index=0"),
        # Kueue's view: whether each JobSet is admitted, and why not.
        "kueueWorkloadsCommand": f"kubectl get workloads.kueue.x-k8s.io -n {ns}",
        "kueueQueueCommand": f"kubectl describe clusterqueue {jobset_inputs.CLUSTER_QUEUE}",
        # After Kueue deactivated the JobSet's Workload (its requeue limit): admit it again.
        "kueueResumeCommand": kueue_resume_command(ns, jobset_name),
        "tensorboardLogDir": tensorboard,
        "tensorboardCommand": f"tensorboard --logdir {tensorboard}",
        **common.console_urls(config, cluster_location, logs_query),
    }
    if smoke_jobset_name:
        # The smoke test is the first thing the training pods run: its verdict (SMOKE PASSED/FAILED, one line
        # per host) is at the top of their logs, and a failed one leaves the JobSet failed or restarting.
        exports["smokeJobName"] = smoke_jobset_name
        exports["smokeResultCommand"] = smoke_result_command(
            ns, f"{JOBSET_NAME_LABEL}={smoke_jobset_name}",
            f"kubectl get jobset -n {ns} {smoke_jobset_name} -o jsonpath="
            f"'{{.status.terminalState}} restarts={{.status.restarts}}{{\"\\n\"}}'")
    return exports
