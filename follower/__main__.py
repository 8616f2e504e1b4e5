"""`python -m follower [predict|serve|export] ...`: a feature party's commands (vfl/cli.role_main parses them).

Its entry functions: train (follower/train.py), predict: answer for new rows (follower/predict.py), serve: answer a
serving leader (follower/serve.py); export writes the trained model as ONNX (vfl/inference/export/cli.py).
"""

from __future__ import annotations

import sys

from follower.predict import predict
from follower.serve import serve
from follower.train import train
from vfl.cli import role_main


def main(argv: list[str] | None = None) -> int:
    return role_main(argv, "follower", "--connect", train, predict, serve)


if __name__ == "__main__":
    sys.exit(main())
