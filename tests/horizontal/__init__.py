"""Tests of vfl/horizontal: the FedAvg example end to end."""
