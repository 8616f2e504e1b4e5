"""`python -m follower [predict|serve|export] ...`: a feature party's entry functions, run by vfl/commands/cli.py.

python -m follower --config follower.yaml          train (follower/train.py)
python -m follower predict --config ... --rows ...  answer for new rows (follower/predict.py)
python -m follower serve --config ...               answer a serving leader (follower/serve.py)
python -m follower export --config ... --out DIR    the trained model as ONNX (vfl/inference/export/cli.py)
"""

from __future__ import annotations

import sys

from follower.predict import predict
from follower.serve import serve
from follower.train import train
from vfl.commands.cli import role_main


def main(argv: list[str] | None = None) -> int:
    return role_main(argv, "follower", "--connect", train, predict, serve)


if __name__ == "__main__":
    sys.exit(main())
