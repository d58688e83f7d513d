"""How to read the multislice smoke job's verdict, for either backend (pure strings)."""
from __future__ import annotations


def smoke_result_command(namespace: str, selector: str, status: str) -> str:
    """One command: the smoke job's state, then the verdict lines (SMOKE PASSED/FAILED) of its pods."""
    return (f"{status}; kubectl logs -n {namespace} -l {selector} --tail=-1 --prefix "
            "| grep -E 'SMOKE (PASSED|FAILED)'")


def ray_smoke_exports(namespace: str, smoke_job_name: str) -> dict[str, str]:
    """The RayJob's submitter pod (a Kubernetes Job named like the RayJob) prints the driver's output,
    which ends with SMOKE PASSED {...} or SMOKE FAILED: ..."""
    return {
        "smokeJobName": smoke_job_name,
        "smokeResultCommand": smoke_result_command(
            namespace, f"job-name={smoke_job_name}",
            f"kubectl get rayjob -n {namespace} {smoke_job_name} -o jsonpath='{{.status.jobStatus}}{{\"\\n\"}}'"),
    }
