"""Tests of the repository as a whole: the layering, the linter and formatter, and the docs."""
