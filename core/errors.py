"""The one error type for settings the trainer refuses before any Ray process starts."""


class PlanError(ValueError):
    """A model/TPU/parallelism/batch combination that cannot run. The message is one line and names
    the offending values, so a CLI can print it as-is and exit 2."""
