"""Workload backends: `workloadBackend` config → the one Backend object (workloads/backend.py) every caller asks.

The name is read once, here; from there on the program, the offline plan, the pre-flight compile, the docs tables
and the dashboard ask the chosen backend, never the name. Each backend package (workloads/ray, workloads/jobset,
workloads/pathways) holds its implementation in backend.py, so "what does the Ray backend launch" is answered in
one file. Adding a backend = one class in its package + one entry in BACKENDS.
"""
from __future__ import annotations

from typing import Any

from infra.config import StackConfig
from workloads.backend import Backend, WorkloadContext
from workloads.jobset.backend import JOBSET
from workloads.pathways.backend import PATHWAYS
from workloads.ray.backend import RAY

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (RAY, JOBSET, PATHWAYS)}


def backend_for(config: StackConfig) -> Backend:
    return BACKENDS[config.workload.backend]


def deploy_workload(config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
    return backend_for(config).deploy(config, context)


def run_name(config: StackConfig) -> str:
    """The MaxText run_name every backend launches: runName, or its job's name and the model (config build,
    infra/config/data_rules.py default_run_name), stable across relaunches so a relaunched job resumes from its
    checkpoints. MaxText also uses it as the goodput job name, the workload_id of the goodput series the dashboard
    charts (maxtext/common/goodput.py get_goodput_job_name)."""
    return config.workload.run.run_name
