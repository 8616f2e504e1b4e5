"""Tests of the party commands (vfl/cli.py, vfl/preflight.py, vfl/local_parties.py): fail fast and clearly."""
