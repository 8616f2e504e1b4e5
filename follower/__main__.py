"""`python -m follower [predict|serve|export] ...`: parse the command and run a feature party's entry function for it.

    python -m follower --config follower.yaml          train (follower/train.py)
    python -m follower predict --config ... --rows ...  answer for new rows (follower/predict.py)
    python -m follower serve --config ...               answer a serving leader (follower/serve.py)
    python -m follower export --config ... --out DIR    the trained model as ONNX (vfl/inference/export/cli.py)

Each command's arguments and guarded run are shared with the other role (vfl/cli.py, vfl/inference/*/cli.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else None
    if command == "predict":
        from follower.predict import predict
        from vfl.inference.predict.cli import predict_main

        return predict_main(argv[1:], "follower", predict)
    if command == "serve":
        from follower.serve import serve
        from vfl.inference.serve.cli import serve_main

        return serve_main(argv[1:], "follower", serve)
    if command == "export":
        from vfl.inference.export.cli import export_main

        return export_main(argv[1:], "follower")
    from follower.train import train
    from vfl.cli import party_main

    return party_main(argv, "follower", "--connect", train)


if __name__ == "__main__":
    sys.exit(main())
