"""Where to watch the Pathways run: the stack's exports for the Pathways path (pure strings)."""
from __future__ import annotations

from infra.config import StackConfig
from workloads import common
from workloads.pathways.manifests import HEAD_JOB, TRAINER_CONTAINER, WORKER_JOB, head_address

def pathways_exports(config: StackConfig, cluster_location: str, jobset_name: str) -> dict[str, str]:
    ns = config.kubernetes.namespace
    jobset_selector = f"jobset.sigs.k8s.io/jobset-name={jobset_name}"
    run = config.workload.run.run_name
    # The MaxText client's log of every JobSet that ran the run (recreated or re-upped under the same run name).
    logs_query = common.container_logs_query(
        config, f'resource.labels.container_name="{TRAINER_CONTAINER}"', common.run_logs_condition(run))
    run_dir = common.run_directory(config, run)
    # The MaxText container of the head pod: elastic recovery shows up in this one log stream.
    logs = (f"kubectl logs -n {ns} -f -l {jobset_selector},"
            f"jobset.sigs.k8s.io/replicatedjob-name={HEAD_JOB} -c {TRAINER_CONTAINER}")
    return {
        "pathwaysJobSet": jobset_name,
        "pathwaysHeadAddress": head_address(jobset_name),
        "pathwaysStatusCommand": f"kubectl get jobset -n {ns} {jobset_name}",
        "pathwaysPodsCommand": f"kubectl get pods -n {ns} -l {jobset_selector} -o wide",
        "pathwaysLogsCommand": logs,
        "logsFollowCommand": logs,
        "pathwaysWorkerPodsCommand": (f"kubectl get pods -n {ns} -l {jobset_selector},"
                                      f"jobset.sigs.k8s.io/replicatedjob-name={WORKER_JOB}"),
        "checkpointDir": f"{run_dir}/checkpoints",
        "tensorboardLogDir": f"{run_dir}/tensorboard",
        **common.console_urls(config, cluster_location, logs_query),
    }
