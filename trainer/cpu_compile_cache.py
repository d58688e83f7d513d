"""A persistent XLA compilation cache for the local run's CPU workers, shared by every host of a worker group.

Where a local run's minutes go: each worker group that starts (the first, and every one after a failure, a
notice or a resize) compiles MaxText's train and eval steps in each of its processes, on two loaded cores. Those
are the same programs every time a group of the same size starts, so a cache directory (trainer.local
--compile-cache) makes every start after the first a read.

JAX's cache (jax/_src/compiler.py `compile_or_get_cached`) writes from process 0 only (`_cache_write`) and keys
each program with the topology fingerprint of its devices (jax/_src/cache_key.py `_hash_accelerator_config`).
On the CPU backend that fingerprint differs from process to process of the same distributed program (measured
with jax 0.10.2: two processes, one sharded jit, the keys differ only in "accelerator_config"), so only process 0
would ever hit: it would race ahead of the others into the first collective, whose gloo context gives up after a
fixed 30 s (why core/maxtext_args.py keeps MaxText's own cache off on CPU). Here the key hashes, in place of the
fingerprint, what identifies the devices on one machine: each device's platform, kind, global id and process,
the same in every process. A group then hits or misses as one, and its processes stay in step.

Only for the local run on CPU (trainer/maxtext_runtime.py run_pre_train installs it when CACHE_ENV is set, which
only trainer.local sets); on TPU, MaxText's own `jax_cache_dir` is used (core/maxtext_args.py).
"""
from __future__ import annotations

# The cache directory, set by trainer.local (--compile-cache) in its Ray nodes' environment (workers inherit it).
CACHE_ENV = "TRAINER_LOCAL_COMPILE_CACHE"


def device_identity(device) -> str:
    """What the key hashes for one device: the same in every process of one machine's distributed run."""
    return f"{device.platform}:{device.device_kind}:{device.id}:{device.process_index}"


def install(cache_dir: str) -> None:
    """Turn JAX's persistent cache on in this process, in CACHE_DIR, for every program (the tiny model's steps
    compile in under JAX's default 1 s threshold on an idle machine, and a miss on one host but not another is
    what must not happen), keyed the same in every process. Idempotent."""
    import jax
    from jax._src import cache_key
    from jax.experimental.compilation_cache import compilation_cache

    def hash_devices_by_identity(hash_obj, accelerators) -> None:
        for device in accelerators.flat:
            cache_key._hash_string(hash_obj, device_identity(device))

    cache_key._hash_accelerator_config = hash_devices_by_identity
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # JAX decides once per process whether the cache is on, at its first compile: decided again with it on.
    compilation_cache.reset_cache()
