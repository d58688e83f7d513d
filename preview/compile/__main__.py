"""`python -m preview.compile` (preview/compile/cli.py)."""
import sys

from preview.compile.cli import main

sys.exit(main())
