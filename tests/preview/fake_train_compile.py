"""Stand-in for MaxText's train_compile in tests/preview/test_compile.py: records its argv and environment, then
prints what train_compile and libtpu print for the case FAKE_COMPILE names (text copied from real compiles
on this project's stacks: libtpu 0.0.42.1, MaxText 0.2.5)."""
import json
import os
import sys
import time
from pathlib import Path

case = os.environ["FAKE_COMPILE"]
Path(os.environ["FAKE_COMPILE_RECORD"]).write_text(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
log = Path(os.environ["TPU_LOG_DIR"]) / "tpu_driver.vm.root.log.INFO.20261122-211314.9008"
print("Starting train_compile.py...", flush=True)
print("Jitting and compiling train step...", flush=True)
if case == "hang":
    time.sleep(60)
if case == "helper":
    # train_compile with a helper process of its own: a stop must end both (their process group).
    import subprocess
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(os.environ["FAKE_COMPILE_PIDS"]).write_text(f"{os.getpid()} {helper.pid}")
    time.sleep(600)
if case == "assigned":
    # libtpu 0.0.42.1, llama3-70b on 2 x v6e-32 at batch 2: XLA's HLO passes end, then code generation runs on.
    log.write_text(
        "I1125 12:49:40.077806    4728 latency_hiding_scheduler.cc:4325] [latency-hiding-scheduler] "
        "LatencyHidingScheduler current memory usage: 20249502912 bytes. Current limit: 16406422732\n"
        "I1125 12:49:41.876896    4728 deepsea_compiler_hlo_passes.cc:5714] XLA::TPU post optimization "
        "rematerialization limit 29.63G = 95% hbm (29.68G) - (arguments (12.33G) - aliased_output(12.33G)) - "
        "overlays (55.84M)\n"
        "I1125 12:49:41.932220    4728 deepsea_compiler_hlo_passes.cc:5728] XLA::TPU rematerialization hbm "
        "reduction:  31.19G => 29.23G\n"
        "I1125 12:49:42.524761    4728 deepsea_compiler_hlo_passes.cc:6241] HLO_PASSES stage duration: 59.6s\n")
    time.sleep(60)
if case == "slow_oom":
    # libtpu 0.0.50.1, llama3-8b on one v6e-64 at batch 13: the HLO passes end with XLA still over its limit after
    # recomputing; on a loaded machine its RESOURCE_EXHAUSTED comes seconds later.
    log.write_text(
        "I1126 18:05:08.728140    7976 latency_hiding_scheduler.cc:4325] [latency-hiding-scheduler] "
        "LatencyHidingScheduler current memory usage: 33387763072 bytes.\n"
        "W1126 18:05:08.731568    7976 hlo_rematerialization.cc:3411] Can't reduce memory use below 29.64GiB "
        "(31823817932 bytes) by rematerialization; only reduced to 32.50GiB (34896598656 bytes), down from 32.50GiB "
        "(34896598656 bytes) originally\n"
        "I1126 18:05:08.735698    7976 deepsea_compiler_hlo_passes.cc:6169] XLA::TPU post optimization "
        "rematerialization limit 29.64G = 95% hbm (29.68G) - (arguments (1.41G) - aliased_output(1.40G)) - overlays "
        "(40.31M)\n"
        "I1126 18:05:08.735752    7976 deepsea_compiler_hlo_passes.cc:6183] XLA::TPU rematerialization hbm "
        "reduction:  32.50G => 32.50G\n"
        "I1126 18:05:08.801124    7976 deepsea_compiler_hlo_passes.cc:6763] HLO_PASSES stage duration: 8.1s\n")
    time.sleep(3)
    print("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the "
          "total memory required for HLO temporaries (32.51G) exceeds available HBM (31.24G). HLO module: "
          "jit_train_step.", flush=True)
    sys.exit(1)
if case == "vmem":
    # libtpu 0.0.50.1, the prod step (llama3-8b, 2 x v6e-16, batch 3) in one decoder layer without the pods'
    # LIBTPU_INIT_ARGS: memory is assigned well within HBM seconds in, and XLA refuses a kernel's scoped VMEM
    # in code generation (5m22s later there, at load 8-11); FAKE_COMPILE_CODEGEN_S stands for that wait.
    log.write_text(
        "I1202 01:34:26.646795   27719 latency_hiding_scheduler.cc:4597] [latency-hiding-scheduler] "
        "LatencyHidingScheduler current memory usage: 15257588928 bytes. Current limit: 25786064896\n"
        "I1202 01:34:26.789365   27719 deepsea_compiler_hlo_passes.cc:6763] HLO_PASSES stage duration: 5.63s\n")
    time.sleep(float(os.environ.get("FAKE_COMPILE_CODEGEN_S", "5")))
    print("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\nRan out of memory in "
          "memory space vmem while allocating on stack for %splash_mha_dkv_segmented_no_residuals.1 = ... Scoped "
          "allocation with size 35.96M and limit 32.00M exceeded scoped vmem limit by 3.96M.", flush=True)
    sys.exit(1)
if case in ("fits", "remat"):
    remat = "I1122 21:02:59.483198   28746 deepsea_compiler_hlo_passes.cc:5728] XLA::TPU rematerialization hbm reduction:  36.02G => 31.36G\n"
    log.write_text(
        "I1122 21:13:14.43 9008 deepsea_compiler_backend.cc:2127] XLA::TPU program HBM usage: 121.5K / 15.75G\n"
        "I1122 21:13:14.43 9008 deepsea_compiler_backend.cc:2171] Total hbm usage >= 260.15M:\n"
        "    reserved        260.00M \n    program          121.5K \n    arguments            0B \n"
        + (remat if case == "remat" else "") +
        "I1122 21:14:28.393051    9119 deepsea_compiler_backend.cc:2127] XLA::TPU program HBM usage: 6.83G / 15.75G\n"
        "I1122 21:14:28.393057    9119 deepsea_compiler_backend.cc:2160] XLA::TPU program VMEM usage: 127.00M / 128.00M\n"
        "I1122 21:14:28.393067    9119 deepsea_compiler_backend.cc:2171] Total hbm usage >= 7.49G:\n"
        "    reserved        258.01M \n    program           6.83G \n    arguments       427.46M \n\n"
        "Output size 427.15M; shares 427.15M with arguments.\n")
    print("Jitting and compilation complete!", flush=True)
    print("Finished train_compile.py successfully!", flush=True)
    sys.exit(0)
if case == "oom":
    log.write_text("E1122 21:31:56.691380     933 deepsea_compiler_base.cc:3781] XLA:TPU compile permanent error. Ran out "
                   "of memory in memory space hbm. Used 44.02G of 31.25G hbm. Exceeded hbm capacity by 12.77G. Memory "
                   "usage report: \n")
    print("Traceback (most recent call last):\n  File \"train_compile.py\", line 311, in main\n    raise e\n"
          "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
          "HLO temporaries (44.02G) exceeds available HBM (31.25G).", flush=True)
    sys.exit(1)
if case == "badflag":
    print("=== Source Location Trace: === \nlearning/45eac/tfrc/runtime/libtpu_init_utils.cc:327\n"
          "ERROR: Unknown command line flag 'xla_tpu_this_flag_does_not_exist'", flush=True)
    sys.exit(1)
if case == "assert":
    print("Traceback (most recent call last):\n  File \"max_utils.py\", line 480, in fill_unspecified_mesh_axes\n"
          "AssertionError: Number of devices per slice 1 does not match the product of the ICI parallelism 16", flush=True)
    sys.exit(1)
sys.exit(3)
