"""Tests of the privacy package: the mechanisms, accountants, ledgers and seals, and the offline attacks."""
