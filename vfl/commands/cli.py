"""`python -m leader|follower [predict|serve|export] ...`: read the command's name and run its shared module.

Each role's `__main__` hands over its entry functions (`train`, `predict`, `serve`); the shared module of the command
parses its arguments and runs the entry function guarded (vfl/cli.py for training, vfl/inference/*/cli.py for the
others; export has no entry function of a role). The commands' modules are imported when their command runs, so
that `--help` stays instant.
"""

from __future__ import annotations

import sys


def role_main(argv: list[str] | None, role: str, endpoint_flag: str, train, predict, serve) -> int:
    """The exit code of the role's command named by argv[0] (`predict`, `serve`, `export`; anything else: training,
    whose endpoint flag is endpoint_flag: `--bind` or `--connect`)."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else None
    if command == "predict":
        from vfl.inference.predict.cli import predict_main

        return predict_main(argv[1:], role, predict)
    if command == "serve":
        from vfl.inference.serve.cli import serve_main

        return serve_main(argv[1:], role, serve)
    if command == "export":
        from vfl.inference.export.cli import export_main

        return export_main(argv[1:], role)
    from vfl.cli import party_main

    return party_main(argv, role, endpoint_flag, train)
