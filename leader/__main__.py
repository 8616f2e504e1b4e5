"""`python -m leader [predict|serve|export] ...`: the label party's commands (vfl/cli.role_main parses them).

Its entry functions: train (leader/train.py), predict: score new rows (leader/predict.py), serve: score ids online
(leader/serve.py); export writes the trained model as ONNX (vfl/inference/export/cli.py).
"""

from __future__ import annotations

import sys

from leader.predict import predict
from leader.serve import serve
from leader.train import train
from vfl.cli import role_main


def main(argv: list[str] | None = None) -> int:
    return role_main(argv, "leader", "--bind", train, predict, serve)


if __name__ == "__main__":
    sys.exit(main())
