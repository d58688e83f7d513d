"""What an `up` trains, in a few lines (the `run` stack output, which the offline plan prints too): the run's name
and folder, whether its job starts it, resumes it or finds it finished (infra/data_lookups.py asked Cloud
Storage), where the weights start from, the data source and its tokenizer, and whether the data position survives
a restart and an elastic resize. Pure: no Pulumi import.
"""
from __future__ import annotations

from core import data
from infra.config import StackConfig
from infra.data_lookups import RunFacts
from workloads import common
from workloads.backends import backend_for

_ACTIONS = {
    "start": "starts it: Cloud Storage holds no checkpoint of it",
    "resume": "resumes it from its newest checkpoint, step {step} of {steps}",
    "finished": "finds it finished (step {step} of {steps}); name a new run to train again",
    "unknown": "starts or resumes it (its checkpoints could not be listed)",
}


def tokenizer_text(config: StackConfig) -> str:
    run = config.workload.run
    if run.dataset_type == "synthetic":
        return "none (synthetic batches are token ids already)"
    settings = dict(run.maxtext_settings)
    if settings.get("tokenize_train_data", "true").lower() == "false":
        return "none: the files hold token ids (maxtextSettings tokenize_train_data=false)"
    own = data.tokenizer_of(config.workload.model)
    return f"{own.asset} ({own.type}), {config.workload.model}'s own"


def position_text(config: StackConfig) -> tuple[str, str]:
    """(after a restart, after an elastic resize) for the run's data."""
    run = config.workload.run
    elastic = backend_for(config).resizes(config)
    if run.dataset_type == "synthetic":
        nothing = "nothing to keep (generated batches)"
        return nothing, nothing if elastic else "no resize (fixed size)"
    # Grain's iterator is saved with every checkpoint and restored with it (core/data.py); whether an elastic run
    # may read grain data at all is core/data.py check_dataset's call (config build asks it).
    kept = "kept (saved with each checkpoint; reads on after the restored step)"
    return kept, ("restored with the checkpoint (core/data.py: what a resize keeps)" if elastic
                  else "no resize (a fixed-size run)")


def run_summary(config: StackConfig, facts: RunFacts) -> str:
    run, workload = config.workload.run, config.workload
    action = facts.action(workload.train_steps)
    lines = [
        f"name {run.run_name}: {common.run_directory(config, run.run_name)}",
        "this up " + _ACTIONS[action].format(step=facts.latest_step, steps=workload.train_steps),
        "weights start from " + (run.load_parameters_path + " (when it starts; a resume loads its own)"
                                 if run.load_parameters_path else "scratch (random initialisation)"),
    ]
    if run.dataset_type == "synthetic":
        lines.append("data: synthetic (generated batches; datasetType=grain, datasetPath: your files)")
    else:
        counts = dict(facts.data_files)
        # A listing stops at its first page of files (infra/data_lookups.py): more pages make it "at least".
        at_least = "at least " if "datasetPath" in facts.data_files_at_least else ""
        found = f", {at_least}{counts['datasetPath']} file(s) found" if "datasetPath" in counts else ""
        lines.append(f"data: {run.dataset_path} ({data_format(run.dataset_path)}{found})")
        lines.append(f"  read-only through Cloud Storage FUSE at {common.mounted_path(run.dataset_path)}")
        if run.eval_dataset_path:
            lines.append(f"eval: {run.eval_dataset_path} every {run.eval_interval} steps")
    restart, resize = position_text(config)
    lines += [f"tokenizer: {tokenizer_text(config)}", f"data position on restart: {restart}",
              f"data position on elastic resize: {resize}"]
    if run.maxtext_settings:
        lines.append("MaxText settings: " + ", ".join(f"{key}={value}" for key, value in run.maxtext_settings))
    return "\n".join(lines)


def data_format(path: str) -> str:
    return {"parquet": "Parquet", "arrayrecord": "ArrayRecord"}.get(data.format_named_by(path) or "", "files")
