"""Pre-flight compile: running one compile (runner), the calibration (calibration), the command line (cli).

The names callers used from the former single module preview/compile.py are re-exported here.
"""
from preview.compile.runner import *  # noqa: F401,F403
from aot.runner import (_clock, _stop_group, _Ticker)  # noqa: F401
from aot.compiler_output import (_SIZE, CompilerVerdict, _size, failure_reason, memory_assignment,  # noqa: F401
                                 over_the_limit, parse_compiler_output)
from aot.kernel_check import run_verdict  # noqa: F401  (the program's verdict: the kernels + memory-only, or full)
from preview.compile import runner  # noqa: F401
from preview.compile.calibration import (ABOUT, CALIBRATION_CASES, DTYPE_SHORT, HELD_OUT, MARGIN_ROWS,  # noqa: F401
                                         CalibrationCase, arguments_source, calibrate, calibration_row,
                                         fill_limits, probe_generation, row_need, row_peak, row_reserved)
from preview.compile.cli import main  # noqa: F401
