"""`python -m preview --stack NAME ...`: the offline plan (see preview/cli.py)."""
import sys

from core.cli_errors import missing_dependency

try:
    from preview.cli import main
except ModuleNotFoundError as error:      # run outside .venv: say how to set it up, in one line
    sys.exit(missing_dependency("python -m preview", error))

sys.exit(main())
