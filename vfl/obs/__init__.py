"""Observability: run logs, progress bars with rate and ETA, metric curves (CSV, TensorBoard, PNG) and metrics.json."""
