"""The ahead-of-time compile of a training step with MaxText's train_compile and libtpu (runner.py)."""
