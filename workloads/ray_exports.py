"""Where to watch the Ray job: the stack's exports for the Ray path (pure strings)."""
from __future__ import annotations

import shlex
from urllib.parse import quote

from infra.config import StackConfig
from workloads import ray_inputs
from workloads.ray_manifests import DASHBOARD_PORT, head_service_name

CONSOLE = "https://console.cloud.google.com"


def ray_exports(config: StackConfig, cluster_location: str, job_name: str) -> dict[str, str]:
    ns, ray_cluster = config.kubernetes.namespace, config.workload.ray_cluster_name
    head = head_service_name(ray_cluster)
    project = config.gcp.project
    logs_query = "\n".join([
        'resource.type="k8s_container"',
        f'resource.labels.cluster_name="{config.cluster.name}"',
        f'resource.labels.namespace_name="{ns}"',
        f'labels."k8s-pod/ray_io/cluster"="{ray_cluster}"',
    ])
    tensorboard = ray_inputs.tensorboard_directory(config)
    return {
        "rayDashboardInClusterUrl": f"http://{head}.{ns}.svc.cluster.local:{DASHBOARD_PORT}",
        "rayDashboardPortForward": f"kubectl port-forward -n {ns} svc/{head} {DASHBOARD_PORT}:{DASHBOARD_PORT}",
        "rayDashboardLocalUrl": f"http://localhost:{DASHBOARD_PORT}",
        "rayJobName": job_name,
        "rayJobSubmit": (f"ray job submit --address http://localhost:{DASHBOARD_PORT} --working-dir . -- "
                         + shlex.join(ray_inputs.entrypoint(config))),
        "rayJobStatusCommand": f"kubectl get rayjob -n {ns} {job_name}",
        "tensorboardLogDir": tensorboard,
        "tensorboardCommand": f"tensorboard --logdir {tensorboard}",
        "consoleWorkloadsUrl": f"{CONSOLE}/kubernetes/workload/overview?project={project}",
        "consoleClusterUrl": (f"{CONSOLE}/kubernetes/clusters/details/{cluster_location}/{config.cluster.name}"
                              f"/details?project={project}"),
        "consoleLogsUrl": f"{CONSOLE}/logs/query;query={quote(logs_query, safe='')}?project={project}",
    }
