"""`python -m preview --stack NAME ...`: the offline plan (see preview/cli.py)."""
import sys

from preview.cli import main

sys.exit(main())
