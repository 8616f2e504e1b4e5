"""`python -m leader [predict|serve|export] ...`: the label party's entry functions, run by vfl/commands/cli.py.

python -m leader --config leader.yaml            train (leader/train.py)
python -m leader predict --config ... --rows ...  score new rows (leader/predict.py)
python -m leader serve --config ...               score ids online (leader/serve.py)
python -m leader export --config ... --out DIR    the trained model as ONNX (vfl/inference/export/cli.py)
"""

from __future__ import annotations

import sys

from leader.predict import predict
from leader.serve import serve
from leader.train import train
from vfl.commands.cli import role_main


def main(argv: list[str] | None = None) -> int:
    return role_main(argv, "leader", "--bind", train, predict, serve)


if __name__ == "__main__":
    sys.exit(main())
