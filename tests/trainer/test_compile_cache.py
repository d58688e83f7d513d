"""trainer/cpu_compile_cache.py: the local run's XLA cache is shared by the processes of one distributed CPU
program, so a group that starts again hits in every process or in none (a hit in process 0 alone races it into
the first collective, whose gloo context gives up after 30 s).

Played with real JAX: two processes of one `jax.distributed` program on CPU compile one sharded function twice,
with a cache directory. JAX writes from process 0 only (jax/_src/compiler.py `_cache_write`), so process 1's second
run hits only if its key equals process 0's; JAX's own key differs between them on CPU (the topology fingerprint,
jax/_src/cache_key.py `_hash_accelerator_config`), the key trainer/cpu_compile_cache.py installs does not."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

PROGRAM = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp
    from jax._src import monitoring
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    process, port, cache, shared = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "shared"
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process)
    if shared:
        from trainer import cpu_compile_cache
        cpu_compile_cache.install(cache)
    else:                                   # JAX's own cache, as MaxText would turn it on
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    events = []
    monitoring.register_event_listener(lambda event, **_: events.append(event))
    mesh = Mesh(jax.devices(), ("x",))
    x = jax.make_array_from_callback((8, 16), NamedSharding(mesh, P("x")), lambda i: jnp.ones((8, 16))[i])
    total = float(jax.jit(lambda a: (a @ a.T).sum())(x))
    hit = "/jax/compilation_cache/cache_hits" in events
    print(f"process {process} total {total} hit {hit}", flush=True)
    jax.distributed.shutdown()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_twice(tmp_path, mode: str) -> list[str]:
    """Both processes, twice over one cache directory: the second run's lines."""
    lines = []
    for _ in range(2):
        port = _free_port()
        procs = [subprocess.Popen([sys.executable, "-c", PROGRAM, str(i), str(port), str(tmp_path / mode), mode],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  env={"PATH": "", "JAX_PLATFORMS": "cpu", "PYTHONPATH": "."})
                 for i in range(2)]
        lines = sorted(proc.communicate(timeout=300)[0].strip().splitlines()[-1] for proc in procs)
    return lines


def test_the_second_start_hits_in_every_process_with_the_shared_key(tmp_path):
    assert _run_twice(tmp_path, "shared") == ["process 0 total 1024.0 hit True", "process 1 total 1024.0 hit True"]


def test_jax_s_own_key_hits_in_process_0_alone_on_cpu(tmp_path):
    """Why the key is replaced: without it the group splits (the race core/maxtext_args.py avoids)."""
    assert _run_twice(tmp_path, "jax") == ["process 0 total 1024.0 hit True", "process 1 total 1024.0 hit False"]
