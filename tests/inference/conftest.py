"""The inference tests' shared fixture: one trained split run that every prediction test predicts with."""

from __future__ import annotations

import pytest

from tests.support.predict_run import train_for_prediction


@pytest.fixture(scope="session")
def trained(synth_tiny, tmp_path_factory):
    """A split run on synth_tiny's vocabulary shards (tests/support/predict_run.py), trained once a session."""
    return train_for_prediction(synth_tiny, tmp_path_factory.mktemp("predict"))
