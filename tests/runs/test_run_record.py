"""The run record a checkpoint keeps, and the hello check on it: a follower's hello for another step or another run is
refused with one sentence naming both sides."""

from __future__ import annotations


def test_a_follower_serving_another_runs_or_steps_checkpoint_is_refused_naming_both_sides():
    from vfl.runs.record import checkpoint_hello_problems, pair_fingerprint
    from vfl.wire.serve_messages import ServeHello

    # Prepare: the leader's record of its run, and a follower's hello for it, for another step, for another run
    record = {
        "run": "a" * 32,
        "model_step": 400,
        "cut_dims": {"leader": 2, "f": 3},
        "keys": {"self": "L", "followers": {"f": "F"}},
    }
    mine = {**record, "keys": {"self": "F", "leader": "L"}}  # the follower's own record of the same run

    def hello(run, step):
        fingerprint = pair_fingerprint({**mine, "run": run, "model_step": step}, "f", 3, leader_side=False)
        return ServeHello("b" * 32, "f", 5, run, step, fingerprint, 3, 20.0, 64, 100.0)

    # Execute / Assert
    assert checkpoint_hello_problems(record, "f", hello("a" * 32, 400), "leader.pt", 5) == []
    (step,) = checkpoint_hello_problems(record, "f", hello("a" * 32, 300), "leader.pt", 5)
    assert "step 300" in step and "step 400" in step
    (run,) = checkpoint_hello_problems(record, "f", hello("c" * 32, 400), "leader.pt", 5)
    assert "cccccccccccc" in run and "aaaaaaaaaaaa" in run
