"""Python API: train and predict with a party, or simulate a run, on the same code as the CLI.

`Leader(...).fit()`, `Follower(...).fit()` and `simulate(...)`; then `Leader(...).predict(rows)`,
`Follower(...).predict(rows)` and `simulate_predict(...)` (docs/predict.md).

    from vfl_api import simulate
    history = simulate("examples/wide_deep_criteo/leader.yaml", ["examples/wide_deep_criteo/follower.yaml"],
                       data="runs/nb/shards", out="runs/nb", overrides={"train.epochs": 2})
    history.test_auc, history.step_losses[:5]   # the model early stopping selected

`Leader` and `Follower` run one party in this process (vfl_api/roles.py: the role's own entry function, as
`python -m leader|follower` runs it) and raise instead of exiting. `simulate` starts the leader and every follower as
local processes over tcp on 127.0.0.1 (vfl_api/local_run.py: the two CLI commands), waits for them with a deadline,
and returns the leader's history.

The API stands above both roles and beside their `__main__`: it imports their entry functions by name, which no
module of vfl/ may do (the framework imports no role; tests/repo/test_architecture.py).
"""

from vfl_api.local_run import simulate, simulate_predict
from vfl_api.roles import Follower, History, Leader, prepare_own_table

__all__ = ["Follower", "History", "Leader", "prepare_own_table", "simulate", "simulate_predict"]
