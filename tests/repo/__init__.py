"""Tests of the repository as a whole: the layering, the tree's conventions, the linter and formatter, and the docs."""
