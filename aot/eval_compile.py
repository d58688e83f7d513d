"""The run's eval step, compiled ahead of time for the step's real TPU target, as MaxText compiles it on the workers
at start: MaxText 0.2.5's train_compile compiles train_step only, while trainers/pre_train/train.py train_loop also
lowers and compiles `p_eval_step` before the first step whenever the run has an eval split. An eval step XLA
refuses fails there, on the paid slices, before step 0.

Run by aot/runner.py run_compile through the compile guard, like train_compile and with the same argv
(`<base.yml> key=value ... compile_topology=... compile_topology_num_slices=N`) and environment (JAX on CPU, the
pods' LIBTPU_INIT_ARGS, the workers' libtpu); the memory-only stop and the verdict's parsing are run_compile's own
(it reads libtpu's log, whoever the compiling program is). Imports MaxText and jax only: it runs without the project
on PYTHONPATH, as train_compile does.

What is the same as on the workers (maxtext 0.2.5):
- the config and mesh: pyconfig.initialize on the argv, train_compile.validate_config and get_topology_mesh;
- the start and end: train_compile.main's PRNG, the flag it appends to LIBTPU_INIT_ARGS and the config's
  compile_xla_flags as compiler options (aot/train_compile_start.py; train.py compiles the eval step with them);
- the state: train_compile.get_shaped_inputs's abstract train state (model and optimizer: eval_step merges the
  whole TrainStateNNX, utils/train_utils.py) and its graphdef, with the shardings train.py gives the eval step
  (sharding.maybe_update_params_sharding_with_opt's state_mesh_shardings, as train_loop passes them to
  train_utils.jit_train_and_eval_step);
- the program: train.eval_step wrapped by maxtext_utils.get_functional_eval_with_signature (no gradient, the state
  not donated, metrics unsharded) and jitted with its shardings as train_utils.jit_eval_step does;
- the batch: maxtext_utils.get_shaped_batch(is_eval=True), i.e. global_batch_size_to_load_eval rows (the argv's
  eval_per_device_batch_size; unset or 0: per_device_batch_size, configs/types.py), sharded by
  get_input_data_sharding under logical_axis_rules_for_eval, lowered under those rules as train.py lowers it.
Not built: DiLoCo's eval (enable_diloco) and MoE's eval graphdef (eval_ragged_buffer_factor > 0, which needs the
concrete state); the process says so and gives no verdict (the presets are dense models without DiLoCo).

Prints "Jitting and compilation complete!" (the line aot/runner.py parse_compiler_output reads as "compiled") when
XLA compiled the eval step; else the compile's exception ends the process with XLA's error in its output.
"""
from __future__ import annotations

import os
import sys


def eval_program(config, mesh):
    """The jitted eval step and its abstract arguments (state, eval batch), as train.py's train_loop builds them."""
    import jax
    from maxtext.trainers.pre_train import train, train_compile
    from maxtext.utils import maxtext_utils, sharding

    (state, _), _, state_mesh_shardings, _, graphdef = train_compile.get_shaped_inputs(mesh, config)
    # train_loop: params_shardings, state_mesh_shardings = maybe_update_params_sharding_with_opt(...), then the
    # updated state_mesh_shardings go to jit_train_and_eval_step for both steps.
    _, state_mesh_shardings = sharding.maybe_update_params_sharding_with_opt(config, state_mesh_shardings)
    data_sharding = sharding.get_input_data_sharding(config, mesh, rules=config.logical_axis_rules_for_eval)
    functional_eval, in_shardings, out_shardings, static_argnums, donate_argnums = (
        maxtext_utils.get_functional_eval_with_signature(train.eval_step, data_sharding, state_mesh_shardings,
                                                         graphdef, config))
    jitted = jax.jit(functional_eval, in_shardings=in_shardings, out_shardings=out_shardings,
                     static_argnums=static_argnums, donate_argnums=donate_argnums)
    batch = maxtext_utils.get_shaped_batch(config, batch_sharding=data_sharding, is_eval=True)
    return jitted, (state, batch)


def main(argv: list[str]) -> int:
    import jax
    from flax.core.spmd import logical_axis_rules
    from maxtext.trainers.pre_train import train_compile

    # Run as a file without the project on the path (aot/runner.py step_program): the shared start is this file's
    # sibling.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_compile_start

    config = train_compile_start.start("the eval step's compile (aot/eval_compile.py)", argv)
    if config.enable_diloco or config.eval_ragged_buffer_factor > 0:
        # Not an XLA verdict: run_compile reports this line as the reason there is none.
        raise SystemExit("NotImplementedError: aot/eval_compile.py builds neither DiLoCo's eval step nor MoE's eval "
                         "graphdef (eval_ragged_buffer_factor > 0)")
    mesh = train_compile.get_topology_mesh(config)
    program, inputs = eval_program(config, mesh)
    print(f"Jitting and compiling eval step at {config.global_batch_size_to_load_eval} rows "
          f"(eval_per_device_batch_size {config.eval_per_device_batch_size:g})...", flush=True)
    with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules_for_eval):
        lowered = program.lower(*inputs)
    return train_compile_start.finish(lowered, config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
