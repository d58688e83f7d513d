"""Where to watch the Pathways run: the stack's exports for the Pathways path (pure strings)."""
from __future__ import annotations

from urllib.parse import quote

from infra.config import StackConfig
from workloads import pathways_inputs, ray_inputs
from workloads.pathways_manifests import HEAD_JOB, TRAINER_CONTAINER, WORKER_JOB, head_address

CONSOLE = "https://console.cloud.google.com"


def pathways_exports(config: StackConfig, cluster_location: str, jobset_name: str) -> dict[str, str]:
    ns, project = config.kubernetes.namespace, config.gcp.project
    jobset_selector = f"jobset.sigs.k8s.io/jobset-name={jobset_name}"
    logs_query = "\n".join([
        'resource.type="k8s_container"',
        f'resource.labels.cluster_name="{config.cluster.name}"',
        f'resource.labels.namespace_name="{ns}"',
        f'resource.labels.container_name="{TRAINER_CONTAINER}"',
        f'labels."k8s-pod/jobset_sigs_k8s_io/jobset-name"="{jobset_name}"',
    ])
    run_dir = f"{ray_inputs.output_directory(config)}/{pathways_inputs.run_name(config)}"
    return {
        "pathwaysJobSet": jobset_name,
        "pathwaysHeadAddress": head_address(jobset_name),
        "pathwaysStatusCommand": f"kubectl get jobset -n {ns} {jobset_name}",
        "pathwaysPodsCommand": f"kubectl get pods -n {ns} -l {jobset_selector} -o wide",
        # The MaxText container of the head pod: elastic recovery shows up in this one log stream.
        "pathwaysLogsCommand": (f"kubectl logs -n {ns} -f -l {jobset_selector},"
                                f"jobset.sigs.k8s.io/replicatedjob-name={HEAD_JOB} -c {TRAINER_CONTAINER}"),
        "pathwaysWorkerPodsCommand": (f"kubectl get pods -n {ns} -l {jobset_selector},"
                                      f"jobset.sigs.k8s.io/replicatedjob-name={WORKER_JOB}"),
        "checkpointDir": f"{run_dir}/checkpoints",
        "tensorboardLogDir": f"{run_dir}/tensorboard",
        "consoleWorkloadsUrl": f"{CONSOLE}/kubernetes/workload/overview?project={project}",
        "consoleClusterUrl": (f"{CONSOLE}/kubernetes/clusters/details/{cluster_location}/{config.cluster.name}"
                              f"/details?project={project}"),
        "consoleLogsUrl": f"{CONSOLE}/logs/query;query={quote(logs_query, safe='')}?project={project}",
    }
