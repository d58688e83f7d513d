"""trainer.smoke --init-timeout reaches jax.distributed.initialize: the JobSet's smoke test waits for a late slice
as long as core/slice_wait.py says, not JAX's default 300 s (jax/_src/distributed.py `initialization_timeout`)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from tests.trainer.test_smoke import cpu_env
from tests.conftest import REPO


def test_a_process_whose_peer_never_comes_gives_up_after_the_given_wait():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Process 0 of 2, the other never starts: JAX waits `--init-timeout` seconds for it, then raises.
    args = ["--expect-devices", "8", "--expect-slices", "2", "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", "2", "--process-id", "0", "--init-timeout", "5"]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "trainer.smoke", *args], cwd=REPO, env=cpu_env(4),
                            capture_output=True, text=True, timeout=120)
    waited = time.monotonic() - started
    assert result.returncode != 0 and "SMOKE PASSED" not in result.stdout
    # JAX's default would have waited 300 s; the interpreter's start and JAX's import take the rest.
    assert 5 <= waited < 110, waited


def test_a_non_positive_wait_is_refused_in_one_line():
    result = subprocess.run([sys.executable, "-m", "trainer.smoke", "--expect-devices", "8", "--init-timeout", "0"],
                            cwd=REPO, env=cpu_env(8), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "--init-timeout=0" in result.stderr
