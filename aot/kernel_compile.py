"""The training step's attention, alone, compiled ahead of time for the step's real TPU target: the Pallas/Mosaic
kernels (splash attention's forward and backward kernels) at the exact per-device shapes and block sizes the
step runs them at, so that XLA decides their scoped VMEM in seconds instead of the whole step's code generation.

Run by aot/kernel_check.py through the compile guard, like MaxText's train_compile and with the same argv
(`<base.yml> key=value ... compile_topology=... compile_topology_num_slices=N`) and environment (JAX on CPU, the
pods' LIBTPU_INIT_ARGS, the workers' libtpu). It imports MaxText and jax only: it runs without the project on
PYTHONPATH, as train_compile does.

What is the same as in the step (maxtext 0.2.5):
- the config: pyconfig.initialize on the same argv (so the recipe's sa_block_* keys, heads, head_dim, sequence,
  batch, dtype, attention kernel and mesh are MaxText's own reading of them);
- the mesh: train_compile.get_topology_mesh (the compile topology's devices, MaxText's create_device_mesh);
- the same start and end as train_compile.main (aot/train_compile_start.py): its PRNG, the flag it appends to
  LIBTPU_INIT_ARGS, the config's compile_xla_flags as compiler options;
- the attention: MaxText's own AttentionOp, built with the arguments models/llama2.py LlamaDecoderLayer gives its
  Attention and Attention gives its AttentionOp (layers/attentions.py), called in train mode on query/key/value
  of the step's global shapes [batch, sequence, heads, head_dim] sharded as Attention constrains them
  (query_axis_names ...), with the step's segment ids; AttentionOp itself shards them into the kernels
  (tpu_flash_attention's shard_map), so each device's kernel sees the step's per-device shapes;
- the backward pass: jax.grad of the output's sum with respect to query, key and value, which makes jax emit the
  splash backward kernels as the step's gradient does (with the recipes' sa_use_fused_bwd_kernel=true one fused
  kernel, splash_mha_dkv_*, computes dq too; the prod step's program holds splash_mha_fwd_segmented_residuals
  and splash_mha_dkv_segmented_no_residuals, printed by main).
What is not: the projections, RoPE, the MLP, the loss and the optimizer (plain XLA, decided by the memory-only
compile's HBM verdict); the decoder's scan and remat (they repeat and recompute the kernels, they do not change
their shapes or block sizes).

Prints "Jitting and compilation complete!" (train_compile's own line, which aot/runner.py parse_compiler_output
reads as "compiled") when XLA compiled the kernels; else the compile's exception ends the process, with XLA's
error ("RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom ...") in its output.
"""
from __future__ import annotations

import os
import re
import sys


def attention_program(config, mesh, forward_only: bool = False):
    """The function to compile (grad of the attention's output sum w.r.t. query, key, value; `forward_only`: the
    output's sum, as the eval step runs it) and its abstract inputs, sharded as the step's Attention layer shards
    them."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from maxtext.common.common_types import MODEL_MODE_TRAIN
    from maxtext.layers.attention_op import AttentionOp
    from maxtext.layers.attentions import Attention
    from maxtext.utils import sharding

    # Attention's defaults for its query/key/value constraints and its decoder-segment sharding (attentions.py).
    import inspect

    params = inspect.signature(Attention.__init__).parameters
    qkv_names = [params[name].default for name in ("query_axis_names", "key_axis_names", "value_axis_names")]
    op = AttentionOp(
        config=config, mesh=mesh, attention_kernel=config.attention, max_target_length=config.max_target_length,
        max_prefill_predict_length=config.max_prefill_predict_length,
        float32_qk_product=config.float32_qk_product, float32_logits=config.float32_logits,
        num_query_heads=config.num_query_heads, num_kv_heads=config.num_kv_heads,
        dropout_rate=config.dropout_rate, dtype=config.dtype,
        compute_axis_order=tuple(map(int, config.compute_axis_order.split(","))), reshape_q=config.reshape_q,
        attn_logits_soft_cap=config.attn_logits_soft_cap, chunk_attn_window_size=config.chunk_attn_window_size,
        use_ragged_attention=config.use_ragged_attention, ragged_block_size=config.ragged_block_size,
        rngs=nnx.Rngs(0))
    # train.py loss_fn cuts the batch to micro_batch_size_to_train_on, or _to_eval_on in the eval step.
    batch = config.micro_batch_size_to_eval_on if forward_only else config.micro_batch_size_to_train_on
    length = config.max_target_length
    shapes = [(batch, length, config.num_query_heads, config.head_dim),
              (batch, length, config.num_kv_heads, config.head_dim),
              (batch, length, config.num_kv_heads, config.head_dim)]
    rules = config.logical_axis_rules
    qkv = [jax.ShapeDtypeStruct(shape, config.dtype, sharding=sharding.create_sharding(mesh, list(names), rules))
           for shape, names in zip(shapes, qkv_names)]
    data = sharding.get_input_data_sharding(config, mesh)
    segments = jax.ShapeDtypeStruct((batch, length), jnp.int32, sharding=data)

    def loss(query, key, value, segment_ids):
        out = op(query, key, value, segment_ids, None, MODEL_MODE_TRAIN)
        out = out[0] if isinstance(out, tuple) else out
        return jnp.sum(out.astype(jnp.float32))

    return (loss if forward_only else jax.grad(loss, argnums=(0, 1, 2))), (*qkv, segments)


def main(argv: list[str]) -> int:
    import jax
    from flax.core.spmd import logical_axis_rules as axis_rules
    from maxtext.trainers.pre_train import train_compile

    # Run as a file without the project on the path (aot/kernel_check.py): the shared start is this file's sibling.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_compile_start

    # --eval: the eval step's kernels (train.py eval_step: the forward pass alone, in train mode, no gradient).
    forward_only = argv[:1] == ["--eval"]
    config = train_compile_start.start("the attention kernels' compile (aot/kernel_compile.py)", argv[forward_only:])
    mesh = train_compile.get_topology_mesh(config)
    program, inputs = attention_program(config, mesh, forward_only)
    with jax.set_mesh(mesh), axis_rules(config.logical_axis_rules):
        lowered = jax.jit(program).lower(*inputs)
    # Which Pallas kernels the program holds (MaxText names its splash kernels splash_mha_*), for the log.
    kernels = sorted(set(re.findall(r"\bsplash_\w+", lowered.as_text())))
    print(f"Jitting and compiling the attention kernels: {', '.join(kernels) or 'no splash kernel'}", flush=True)
    return train_compile_start.finish(lowered, config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
