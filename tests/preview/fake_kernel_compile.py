"""Stand-in for aot/kernel_compile.py (the step's attention kernels compiled alone): records its argv and
environment, then prints what the real kernel compile printed for the case FAKE_KERNELS names (default "fits";
text from the real compiles of the prod step in one layer, libtpu 0.0.50.1, MaxText 0.2.5)."""
import json
import os
import sys
import time
from pathlib import Path

case = os.environ.get("FAKE_KERNELS", "fits")
record = os.environ.get("FAKE_KERNELS_RECORD")
if record:
    Path(record).write_text(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
print("Starting the attention kernels' compile (aot/kernel_compile.py)...", flush=True)
print("Jitting and compiling the attention kernels: splash_mha_dkv_segmented_no_residuals, "
      "splash_mha_fwd_segmented_residuals", flush=True)
if case == "hang":
    time.sleep(60)
if case == "vmem":
    # Without the pods' LIBTPU_INIT_ARGS: XLA's default 32 MiB of scoped VMEM.
    print("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\nRan out of memory in "
          "memory space vmem while allocating on stack for %splash_mha_dkv_segmented_no_residuals.1 = ... Scoped "
          "allocation with size 35.96M and limit 32.00M exceeded scoped vmem limit by 3.96M.", flush=True)
    sys.exit(1)
if case == "broken":
    # A configuration the kernel program cannot build: no verdict of XLA's.
    print("Traceback (most recent call last):\n  File \"kernel_compile.py\", line 60, in attention_program\n"
          "ValueError: TPU Tokamax ring attention requires use_tokamax_splash=True.", flush=True)
    sys.exit(1)
if case == "fits":
    log = Path(os.environ["TPU_LOG_DIR"]) / "tpu_driver.vm.root.log.INFO.20261202-043855.29959"
    log.write_text("I1202 04:39:19.431708   30269 deepsea_compiler_backend.cc:2290] XLA::TPU program VMEM usage: "
                   "64.75M / 128.00M\n")
    print("Jitting and compilation complete!", flush=True)
    sys.exit(0)
sys.exit(3)
