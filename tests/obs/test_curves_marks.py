"""curves.png marks what a reader looks for: the step early stopping selected and the data's Bayes-optimal AUC."""

from __future__ import annotations

from vfl.obs.curves import RunCurves


def test_the_plot_marks_the_selected_step_and_the_bayes_optimal_auc(tmp_path):
    # Prepare: a run's curves with three evaluations
    def run(out, **marks):
        curves = RunCurves(str(out), "leader", tensorboard=False)
        for step in range(1, 31):
            curves.step(0, step, 0.7 - step / 100)
            if step % 10 == 0:
                curves.evaluation(
                    {
                        "epoch": 0,
                        "step": step,
                        "train_loss": 0.5,
                        "valid": {"auc": 0.7 + step / 1000},
                        "test_auc": 0.69 + step / 1000,
                    }
                )
        curves.close(**marks)
        return (out / "curves.png").read_bytes()

    # Execute
    plain = run(tmp_path / "plain")
    marked = run(tmp_path / "marked", selected_step=20, bayes=0.75)
    # Assert: both drawn; the marks change the picture
    assert plain[:4] == marked[:4] == b"\x89PNG" and plain != marked
