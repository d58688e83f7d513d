"""`python -m trainer.local`: the training job on this machine (see trainer/local/run.py)."""
import sys

from trainer.local.run import main

sys.exit(main())
