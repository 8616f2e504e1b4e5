"""Horizontal (FedAvg) simulation that exercises the privacy package's mechanisms end to end."""
