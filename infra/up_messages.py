"""What the Pulumi program itself says during `pulumi preview`/`pulumi up`: every warning and note laid out so
each line fits 100 columns, as the program's refusals are (infra/config/model.py ConfigError).

The texts are built whole (the offline plan's --json keeps them so); here they are wrapped once, at the one
place they are handed to Pulumi (__main__.py): prose at spaces under a four-column indent, a command quoted on a
line of its own between its arguments with ` \\` continuations (core/cli_errors.fit_columns).
"""
from __future__ import annotations

from core.cli_errors import COMMAND_STARTS, MAX_COLUMNS, fit_columns


def for_pulumi(text: str, width: int = MAX_COLUMNS) -> str:
    """`text` as the program passes it to pulumi.log.warn/info: every line within `width` columns. Prose is
    wrapped at spaces; a line that starts a command (core/cli_errors.COMMAND_STARTS) between its arguments with
    ` \\` continuations; a line that continues a command (the line before ends with ` \\`) is left as written:
    its own builder keeps it within the width, and wrapping it as prose would split an argument."""
    out: list[str] = []
    continued = False
    for line in text.split("\n"):
        if continued:
            out.append(line)
        elif line.lstrip(" ").startswith(COMMAND_STARTS):
            # fit_columns reads its first line as prose: the command goes second, after a line it drops.
            out.append(fit_columns("-\n" + line, width).split("\n", 1)[1])
        else:
            out.append(fit_columns(line, width))
        continued = line.endswith(" \\")
    return "\n".join(out)
