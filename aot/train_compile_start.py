"""The start and the end MaxText 0.2.5's train_compile.main gives a compile, shared by the project's other compile
programs (aot/kernel_compile.py, aot/eval_compile.py), so that they compile under what train_compile sets:
- start: jax's default PRNG `unsafe_rbg` and `--xla_tpu_spmd_rng_bit_generator_unsafe=true` appended to the pods'
  LIBTPU_INIT_ARGS (trainers/pre_train/train_compile.py main, its first lines), then the config from the argv
  (pyconfig.initialize) checked by train_compile.validate_config;
- end: the lowered program compiled with the config's compile_xla_flags as compiler options (train.py compiles its
  steps with them too), then train_compile's own "Jitting and compilation complete!" (the line aot/runner.py
  parse_compiler_output reads as "compiled"); a refusal is the compile's exception, XLA's error in the output.

Those programs run as files (`python aot/kernel_compile.py ...`: aot/kernel_check.py, aot/runner.py step_program)
without the project on the path, so they import it from their own directory (their __file__'s, put first on
sys.path: also under `python -P`). It imports only MaxText and jax, as they do.
"""
from __future__ import annotations

import os
import sys

# Appended to LIBTPU_INIT_ARGS by train_compile.main before anything touches the TPU backend.
SPMD_RNG_FLAG = " --xla_tpu_spmd_rng_bit_generator_unsafe=true"
COMPLETE = "Jitting and compilation complete!"


def start(program: str, argv: list[str]):
    """train_compile.main's start, announced as `program`: the PRNG, the appended libtpu flag, the config from
    `argv` (key=value after the base config), validated. Returns the config."""
    import jax
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train_compile

    jax.config.update("jax_default_prng_impl", "unsafe_rbg")
    os.environ["LIBTPU_INIT_ARGS"] = os.environ.get("LIBTPU_INIT_ARGS", "") + SPMD_RNG_FLAG
    print(f"Starting {program}...", flush=True)
    config = pyconfig.initialize([sys.argv[0], *argv])
    train_compile.validate_config(config)
    return config


def finish(lowered, config) -> int:
    """Compile `lowered` as train_compile does (the config's compile_xla_flags) and say so in its words; XLA's
    refusal raises out of here and ends the process."""
    from maxtext.utils import max_utils

    lowered.compile(compiler_options=max_utils.parse_libtpu_flags_to_dict(config.compile_xla_flags))
    print(COMPLETE, flush=True)
    return 0
