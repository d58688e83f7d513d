"""What to run after `pulumi up`: the `nextSteps` and `watchCommand` exports (pure strings).

`pulumi stack output nextSteps` prints the commands in the order a user needs them, each with a shell comment
saying what it shows, so the output can be read or pasted into a shell as it is.
"""
from __future__ import annotations

from typing import Mapping

# Per backend: the export keys worth running after the credentials, in order, with what each shows.
_STEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "rayjob": (
        ("rayJobStatusCommand", "the job's state (add --watch to follow it)"),
        ("smokeResultCommand", "the multislice smoke test's verdict"),
        ("rayDashboardPortForward", "then open http://localhost:8265 (Ray dashboard, TPU charts per node)"),
        ("tensorboardCommand", "loss, step time, tokens/s (needs: pip install tensorboard gcsfs)"),
    ),
    "jobset": (
        ("kueueWorkloadsCommand", "is the JobSet admitted by Kueue?"),
        ("jobsetStatusCommand", "the JobSet's state (add --watch to follow it)"),
        ("smokeResultCommand", "the multislice smoke test's verdict"),
        ("jobsetLogsCommand", "the training pods' last lines"),
        ("tensorboardCommand", "loss, step time, tokens/s (needs: pip install tensorboard gcsfs)"),
    ),
    "pathways": (
        ("pathwaysStatusCommand", "the JobSet's state (add --watch to follow it)"),
        ("pathwaysLogsCommand", "MaxText's log on the Pathways head, elastic recoveries included"),
    ),
}
_STATUS_KEY = {"rayjob": "rayJobStatusCommand", "jobset": "jobsetStatusCommand", "pathways": "pathwaysStatusCommand"}


def watch_command(backend: str, exports: Mapping[str, str]) -> str:
    """One command that follows the training job's state until interrupted."""
    return f"{exports[_STATUS_KEY[backend]]} --watch"


def next_steps(backend: str, get_credentials: str, exports: Mapping[str, str], dashboard_url: str) -> str:
    """The commands to run after `pulumi up`, each below a comment saying what it shows."""
    steps = [(get_credentials, "point kubectl at the new cluster (needs gke-gcloud-auth-plugin)")]
    steps += [(exports[key], note) for key, note in _STEPS[backend] if key in exports]
    lines = [f"# {note}\n{command}" for command, note in steps]
    lines.append(f"# Cloud Monitoring dashboard (slices, TPU use, goodput): {dashboard_url}")
    return "\n".join(lines)
