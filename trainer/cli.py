"""Command-line options shared by trainer.entrypoint and trainer.local.

Every option can also come from the environment as TRAINER_<OPTION> (e.g. TRAINER_MODEL, TRAINER_STEPS), so a
RayJob/JobSet manifest can set env vars instead of templating a command line. Flags win over env vars.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Mapping

from core.errors import PlanError
from core.maxtext_args import (CHECKPOINT_PERIOD_RULE, DATASET_TYPES, DEFAULT_CHECKPOINTS_TO_KEEP, RunSettings,
                               default_checkpoint_period)
from core.memory import REMAT_POLICIES
from core.maxtext_memory_keys import LIFTED_KEYS, with_maxtext_keys
from core.planner import PlanRequest
from core.presets import PRESETS


def _env(name: str, default: Any) -> Any:
    return os.environ.get("TRAINER_" + name.upper().replace("-", "_"), default)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _key_value(text: str) -> tuple[str, str]:
    """A --set item, split once as the command line is parsed: (KEY, VALUE); a later one for the same KEY wins."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def parse_elastic(text: str) -> tuple[int, int]:
    """'MIN,MAX' in whole slices -> (min, max)."""
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        raise PlanError(f"--elastic {text!r}: expected MIN,MAX whole slices, e.g. 1,2") from None
    if not 1 <= low <= high:
        raise PlanError(f"--elastic {text!r}: need 1 <= MIN <= MAX slices")
    return low, high


def add_plan_arguments(parser: argparse.ArgumentParser, defaults: Mapping[str, Any]) -> None:
    g = parser.add_argument_group("model and TPU slices (core.planner)")
    g.add_argument("--model", default=_env("model", defaults["model"]), help=f"{', '.join(list(PRESETS)[:-1])} or {list(PRESETS)[-1]}")
    g.add_argument("--generation", default=_env("generation", defaults["generation"]), metavar="GEN", help="TPU generation, e.g. v6e")
    g.add_argument("--topology", default=_env("topology", defaults["topology"]), help="slice topology, e.g. 4x4")
    g.add_argument("--slices", type=_positive_int, default=None,
                   help=f"number of slices (default {defaults['slices']}; with --elastic: its MAX)")
    g.add_argument("--elastic", default=_env("elastic", None), metavar="MIN,MAX",
                   help="elastic run between MIN and MAX whole slices")
    for flag in ("ici-fsdp", "ici-tensor", "dcn-data", "dcn-fsdp"):
        g.add_argument(f"--{flag}", type=int, default=_env(flag, None), metavar="N", help=f"{flag.replace('-', '_')}_parallelism")
    g.add_argument("--per-device-batch-size", type=float, default=_env("per_device_batch_size", None))
    g.add_argument("--max-target-length", type=int, default=_env("max_target_length", None), metavar="LEN",
                   help="sequence length")
    g.add_argument("--remat-policy", default=_env("remat_policy", None), choices=REMAT_POLICIES, metavar="POLICY",
                   help="MaxText remat_policy: full, minimal, custom, ...")
    g.add_argument("--remat-offload", default=_env("remat_offload", None), metavar="T1,T2",
                   help="tensors the custom remat policy offloads to host memory")
    g.add_argument("--weight-dtype", default=_env("weight_dtype", None), choices=("float32", "bfloat16"))
    g.add_argument("--attention", default=_env("attention", None))
    g.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                   default=_env("memory_check", "true").lower() != "false",
                   help="keep a plan over the HBM limit once XLA says it fits")


def add_run_arguments(parser: argparse.ArgumentParser, defaults: Mapping[str, Any]) -> None:
    g = parser.add_argument_group("run (MaxText)")
    g.add_argument("--run-name", default=_env("run_name", defaults.get("run_name")))
    g.add_argument("--base-output-directory", default=_env("base_output_directory", defaults.get("base_output_directory")),
                   metavar="DIR", help="checkpoints, compile cache and logs (gs://... on GKE)")
    g.add_argument("--steps", type=_positive_int, default=int(_env("steps", defaults["steps"])))
    g.add_argument("--checkpoint-period", type=_positive_int, default=_env("checkpoint_period", defaults.get("checkpoint_period")),
                   metavar="N", help="steps between checkpoints (default: "
                   + (f"{defaults['checkpoint_period']})" if defaults.get("checkpoint_period") else
                      f"{CHECKPOINT_PERIOD_RULE})"))
    g.add_argument("--checkpoints-to-keep", type=_positive_int,
                   default=_env("checkpoints_to_keep", DEFAULT_CHECKPOINTS_TO_KEEP), metavar="N",
                   help="MaxText keeps this many newest checkpoints")
    # Checked in run_settings (one line naming a removed type's reason), not by argparse's `choices`.
    g.add_argument("--dataset-type", default=_env("dataset_type", "synthetic"), metavar="TYPE",
                   help=f"{' or '.join(DATASET_TYPES)} (core/data.py says what resumes)")
    g.add_argument("--dataset-path", default=_env("dataset_path", ""), metavar="FILES", help="grain: file pattern of the data")
    g.add_argument("--dataset-format", default=_env("dataset_format", ""), metavar="FORMAT",
                   help="grain: arrayrecord or parquet (default: by suffix)")
    g.add_argument("--pretokenized", action="store_true", default=_env("pretokenized", "false").lower() == "true",
                   help="grain: the files hold token ids, not text to tokenize")
    g.add_argument("--eval-dataset-path", default=_env("eval_dataset_path", ""), metavar="FILES",
                   help="grain: file pattern of the eval split (same format)")
    g.add_argument("--eval-interval", type=int, default=int(_env("eval_interval", 0)), metavar="N",
                   help="steps between evaluations (with --eval-dataset-path)")
    g.add_argument("--eval-steps", type=int, default=int(_env("eval_steps", 0)), metavar="N",
                   help="batches per evaluation (default: to the files' end)")
    g.add_argument("--load-parameters-path", default=_env("load_parameters_path", ""), metavar="PATH",
                   help="Orbax weights to start from (.../<step>/items)")
    g.add_argument("--tokenizer-path", default=_env("tokenizer_path", ""), metavar="PATH",
                   help="default: the model's own (MaxText's); not another's")
    g.add_argument("--jax-cache-dir", default=_env("jax_cache_dir", ""))
    g.add_argument("--set", dest="extra", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
                   help="extra MaxText override (repeatable); cannot replace a planned key")


def plan_request(args: argparse.Namespace, default_slices: int) -> PlanRequest:
    slices = args.slices if args.slices is not None else int(_env("slices", default_slices))
    min_slices = None
    if args.elastic:
        min_slices, max_slices = parse_elastic(args.elastic)
        if args.slices is not None and args.slices != max_slices:
            raise PlanError(f"--slices {args.slices} disagrees with --elastic {args.elastic} (MAX is the slice count)")
        slices = max_slices

    def opt_int(value):
        return None if value is None else int(value)

    request = PlanRequest(
        model=args.model, generation=args.generation, topology=args.topology, slices=slices, min_slices=min_slices,
        ici_fsdp=opt_int(args.ici_fsdp), ici_tensor=opt_int(args.ici_tensor),
        dcn_data=opt_int(args.dcn_data), dcn_fsdp=opt_int(args.dcn_fsdp),
        per_device_batch_size=None if args.per_device_batch_size is None else float(args.per_device_batch_size),
        max_target_length=opt_int(args.max_target_length),
        remat_policy=args.remat_policy,
        remat_offload=tuple(t for t in args.remat_offload.split(",") if t) if args.remat_offload is not None else None,
        weight_dtype=args.weight_dtype, attention=args.attention,
        memory_check=getattr(args, "memory_check", True),
        # A run with an eval split also runs MaxText's eval step: planned too (core/planner.py eval_memory).
        evaluates=bool(getattr(args, "eval_dataset_path", "")),
    )
    # --set keys that change memory: context parallelism, vocabulary tiling and mu_dtype are planned and
    # estimated, the rest (quantization ...) named in the plan as not estimated (core/maxtext_memory_keys.py
    # with_maxtext_keys).
    return with_maxtext_keys(request, dict(getattr(args, "extra", [])))[0]


def run_settings(args: argparse.Namespace, hardware: str) -> RunSettings:
    # Keys the planner takes in (plan_request) are launched as planned keys, not as extras.
    extra = {key: value for key, value in args.extra if key not in LIFTED_KEYS}
    checkpoint_period = (int(args.checkpoint_period) if args.checkpoint_period is not None
                         else default_checkpoint_period(args.steps))
    run = RunSettings(
        run_name=args.run_name or "", base_output_directory=args.base_output_directory or "",
        steps=args.steps, checkpoint_period=checkpoint_period, checkpoints_to_keep=int(args.checkpoints_to_keep),
        dataset_type=args.dataset_type, dataset_path=args.dataset_path, dataset_format=args.dataset_format,
        pretokenized=args.pretokenized, eval_dataset_path=args.eval_dataset_path, eval_interval=args.eval_interval,
        eval_steps=args.eval_steps, load_parameters_path=args.load_parameters_path, tokenizer_path=args.tokenizer_path,
        jax_cache_dir=args.jax_cache_dir, hardware=hardware, extra=extra,
    )
    run.validate()
    return run
