"""Where to watch the Ray job: the stack's exports for the Ray path (pure strings)."""
from __future__ import annotations

import shlex

from infra.config import StackConfig
from workloads import common
from workloads.ray import spec as ray_inputs
from workloads.next_steps import ray_token_command, with_ray_token
from workloads.ray.manifests import DASHBOARD_PORT, head_service_name

def ray_exports(config: StackConfig, cluster_location: str, job_name: str) -> dict[str, str]:
    ns, ray_cluster = config.kubernetes.namespace, config.ray.cluster_name
    head = head_service_name(ray_cluster)
    # The run's pods (head, workers, submitter) across its jobs, restarts and re-ups under the same run name.
    run = config.workload.run.run_name
    logs_query = common.container_logs_query(config, common.run_logs_condition(run))
    tensorboard = common.tensorboard_directory(config, run)
    return {
        "rayDashboardInClusterUrl": f"http://{head}.{ns}.svc.cluster.local:{DASHBOARD_PORT}",
        "rayDashboardPortForward": f"kubectl port-forward -n {ns} svc/{head} {DASHBOARD_PORT}:{DASHBOARD_PORT}",
        "rayDashboardLocalUrl": f"http://localhost:{DASHBOARD_PORT}",
        "rayJobName": job_name,
        # With the RayCluster's token (token auth is on: authOptions), through the dashboard's port-forward.
        "rayJobSubmit": with_ray_token(f"ray job submit --address http://localhost:{DASHBOARD_PORT} --working-dir . -- "
                                       + shlex.join(ray_inputs.entrypoint(config)), ns, job_name),
        "rayJobStatusCommand": f"kubectl get rayjob -n {ns} {job_name}",
        # KubeRay names the submitter Job after the RayJob (rayjob_controller.go createNewK8sJob), and the submitter
        # streams the driver's log (trainer/submitter.py).
        "logsFollowCommand": f"kubectl logs -n {ns} -f job/{job_name}",
        "rayAuthTokenCommand": ray_token_command(ns, job_name),
        "tensorboardLogDir": tensorboard,
        "tensorboardCommand": f"tensorboard --logdir {tensorboard}",
        **common.console_urls(config, cluster_location, logs_query),
    }
