"""`python -m leader [predict|serve|export] ...`: parse the command and run the label party's entry function for it.

    python -m leader --config leader.yaml            train (leader/train.py)
    python -m leader predict --config ... --rows ...  score new rows (leader/predict.py)
    python -m leader serve --config ...               score ids online (leader/serve.py)
    python -m leader export --config ... --out DIR    the trained model as ONNX (vfl/inference/export/cli.py)

Each command's arguments and guarded run are shared with the other role (vfl/cli.py, vfl/inference/*/cli.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else None
    if command == "predict":
        from leader.predict import predict
        from vfl.inference.predict.cli import predict_main

        return predict_main(argv[1:], "leader", predict)
    if command == "serve":
        from leader.serve import serve
        from vfl.inference.serve.cli import serve_main

        return serve_main(argv[1:], "leader", serve)
    if command == "export":
        from vfl.inference.export.cli import export_main

        return export_main(argv[1:], "leader")
    from leader.train import train
    from vfl.cli import party_main

    return party_main(argv, "leader", "--bind", train)


if __name__ == "__main__":
    sys.exit(main())
