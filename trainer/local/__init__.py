"""Helpers that run the training job on this machine only (fake TPU slices on a local Ray cluster); not shipped."""
