"""Stand-in for aot/eval_compile.py (the run's eval step): records its argv and environment in FAKE_EVAL_RECORD,
then plays the case FAKE_EVAL_COMPILE names (default FAKE_COMPILE's) with fake_train_compile.py's canned output of
real compiles, so a test can have XLA fit the train step and refuse the eval step."""
import os
import runpy
from pathlib import Path

os.environ["FAKE_COMPILE"] = os.environ.get("FAKE_EVAL_COMPILE") or os.environ["FAKE_COMPILE"]
os.environ["FAKE_COMPILE_RECORD"] = os.environ.get("FAKE_EVAL_RECORD") or os.environ["FAKE_COMPILE_RECORD"]
print("Starting the eval step's compile (tests/preview/fake_eval_compile.py)...", flush=True)
runpy.run_path(str(Path(__file__).with_name("fake_train_compile.py")), run_name="__main__")
