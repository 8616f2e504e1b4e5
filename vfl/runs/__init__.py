"""A training run's directory and record, which training writes and prediction, serving and export read."""
