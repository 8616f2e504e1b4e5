"""How the user invoked a command, for its usage line: the `vfl-*` console command or `python -m MODULE`."""

from __future__ import annotations

import os
import sys


def command_name(module: str) -> str:
    """How the user invoked this command, for its usage line: `vfl-leader` when run as that console command,
    else `python -m MODULE`."""
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return invoked if invoked.startswith("vfl-") else f"python -m {module}"
