"""What a run leaves and shows: logging levels, progress bars, metrics.csv / TensorBoard / PNG, reused shards, the API."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO


@pytest.fixture
def verbosity():
    from vfl.obs.logs import set_verbosity

    yield set_verbosity
    set_verbosity()


def test_run_log_console_levels_and_timestamped_file(tmp_path, capsys, verbosity):
    # Prepare
    from vfl.obs.logs import RunLog, message_of

    # Execute
    verbosity()
    log = RunLog(str(tmp_path / "p.log"), "p")
    log("epoch 0 step 1/2 loss: 0.500000")
    log.debug("details")
    log.warning("warning: big")
    log.file_only("Traceback (most recent call last): ...")
    log.close()
    normal = capsys.readouterr()
    verbosity(quiet=True)
    quiet = RunLog(None, "q")
    quiet("hidden")
    quiet.error("error: shown")
    quiet.close()
    q = capsys.readouterr()
    # Assert: INFO lines exactly as written on stdout, warnings on stderr, DEBUG and file_only in the file only
    assert normal.out == "epoch 0 step 1/2 loss: 0.500000\n" and normal.err == "warning: big\n"
    lines = (tmp_path / "p.log").read_text().splitlines()
    assert [message_of(x) for x in lines] == [
        "epoch 0 step 1/2 loss: 0.500000",
        "details",
        "warning: big",
        "Traceback (most recent call last): ...",
    ]
    assert lines[0][:2] == "20" and " INFO " in lines[0] and " DEBUG " in lines[1] and " WARNING " in lines[2]
    assert q.out == "" and q.err == "error: shown\n"


def test_progress_bar_shows_rate_when_forced_and_stays_silent_in_a_pipe(tmp_path):
    # Execute
    cmd = [sys.executable, "-m", "vfl.data", "synth", "--rows", "3000", "--seed", "1"]
    forced = subprocess.run(
        cmd + ["--out", str(tmp_path / "a.tsv")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VFL_PROGRESS": "1"},
    )
    piped = subprocess.run(
        cmd + ["--out", str(tmp_path / "b.tsv")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "VFL_PROGRESS"},
    )
    # Assert
    assert forced.returncode == 0 and "synth: 100%" in forced.stderr and "rows/s" in forced.stderr
    assert piped.returncode == 0 and piped.stderr == ""


def test_curves_csv_tensorboard_png_and_a_resume_continues_the_history(tmp_path):
    # Prepare
    from vfl.obs.curves import RunCurves, read_metrics_csv

    def entry(epoch, step):
        return {
            "epoch": epoch,
            "step": step,
            "train_loss": 0.5,
            "valid": {"auc": 0.7, "auc_noisy": 0.6, "logloss": 0.4},
            "test_auc": 0.71,
            "test_logloss": 0.41,
            "samples_per_second": 100.0,
        }

    first = RunCurves(str(tmp_path), "leader")
    for s in range(1, 7):  # an attempt that got to step 6, evaluated at 3 and 6
        first.step(s > 3, s, 1.0 / s)
        if s % 3 == 0:
            first.evaluation(entry(s > 3, s))
    first.close()
    # Execute: resumed from the checkpoint at step 3
    second = RunCurves(str(tmp_path), "leader", start_step=3)
    for s in range(4, 7):
        second.step(1, s, 2.0 / s)
    second.evaluation(entry(1, 6))
    second.close()
    # Assert: steps 1..6 once each (4..6 from the resumed run), evaluations at 3 and 6, the PNG and events
    rows = read_metrics_csv(str(tmp_path / "metrics.csv"))
    steps = [(int(r["step"]), float(r["loss"])) for r in rows if r["kind"] == "step"]
    assert steps == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.5), (5, 0.4), (6, 1 / 3)]
    assert [int(r["step"]) for r in rows if r["kind"] == "eval"] == [3, 6]
    assert float(rows[-1]["valid_auc"]) == 0.7 and float(rows[-1]["test_auc"]) == 0.71
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tensorboard" / "leader"))


def test_prepare_reuse_keeps_matching_shards_and_redoes_changed_ones(tmp_path, synth_small):
    # Prepare: a 3000-row copy of the source
    src = tmp_path / "s.tsv"
    src.write_text("".join(synth_small.read_text().splitlines(keepends=True)[:3000]))

    def prepare(*extra):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "vfl.data",
                "prepare",
                "--input",
                str(src),
                "--out",
                str(tmp_path / "o"),
                "--hash-buckets",
                "500",
                "--force",
                "--reuse",
                *extra,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # Execute
    made, kept, other_seed = prepare(), prepare(), prepare("--seed", "3")
    lines = src.read_text().splitlines(keepends=True)
    lines[-1] = ("1" if lines[-1][0] == "0" else "0") + lines[-1][1:]  # one label flipped: same size, other content
    src.write_text("".join(lines))
    changed = prepare("--seed", "3")
    # Assert
    assert made.returncode == 0 and made.stdout.startswith("prepared")
    assert (
        kept.returncode == 0
        and kept.stdout.startswith("reusing prepared shards")
        and "options and parties match" in kept.stdout
    )
    assert "preparing again: prepare options differ" in other_seed.stdout and "seed" in other_seed.stdout
    assert "preparing again:" in changed.stdout and "other content" in changed.stdout, changed.stdout + changed.stderr


def test_notebook_example_trains_through_the_api_and_leaves_curves(tmp_path):
    # Execute: examples/notebook/train_with_api.py on 6000 synthetic rows
    r = subprocess.run(
        [sys.executable, "examples/notebook/train_with_api.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "VFL_EXAMPLE_ROWS": "6000", "VFL_EXAMPLE_OUT": str(tmp_path)},
    )
    # Assert
    assert r.returncode == 0, r.stderr[-3000:]
    assert "final test AUC" in r.stdout and "steps, first losses" in r.stdout
    for name in ("metrics.csv", "metrics.json", "curves.png", "leader.log", "follower0.log"):
        assert (tmp_path / name).exists(), name
    assert os.listdir(tmp_path / "tensorboard" / "leader")


def test_simulate_names_the_party_that_failed(tmp_path, shards_small):
    # Prepare
    from vfl_api import simulate

    # Execute
    with pytest.raises(RuntimeError) as e:
        simulate(
            str(REPO / "examples/wide_deep_criteo/leader.yaml"),
            [str(REPO / "examples/wide_deep_criteo/follower.yaml")],
            data=str(shards_small),
            out=str(tmp_path),
            overrides={"data.dense": ["I1"]},
            timeout_s=120,
        )
    # Assert: the first party to fail is named with its one-line reason, and no process is left
    assert "exited with status" in str(e.value) and "does not match the shard's columns" in str(e.value)


def test_leader_and_follower_objects_fit_in_this_process(tmp_path, shards_small):
    # Prepare: the follower's fit() in a thread, the leader's in the test, over tcp on 127.0.0.1
    import threading

    from tests.support.party_processes import party_configs
    from vfl_api import Follower, Leader

    cfgs = party_configs(str(tmp_path), str(shards_small), train={"epochs": 2})
    leader, follower = Leader(cfgs["leader"], train__lr=2e-2), Follower(cfgs["follower0"], train__lr="2e-2")
    steps: dict = {}
    worker = threading.Thread(target=lambda: steps.setdefault("follower0", follower.fit()), daemon=True)
    # Execute
    worker.start()
    history = leader.fit()
    worker.join(60)
    # Assert: both trained every step; the history has both epochs' evaluations and the curves exist
    assert steps["follower0"] == len(history.step_losses) == history.metrics["steps"] > 0
    assert [e["epoch"] for e in history.evaluations] == [0, 1] and 0.6 < history.test_auc <= 1
    assert os.path.exists(history.csv_path) and leader.config.train.lr == follower.config.train.lr == 0.02
