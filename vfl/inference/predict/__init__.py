"""Batch prediction: a file of new rows scored across the parties with the model training selected."""
