"""The test suite: a package per library package it exercises (docs/layout.md), helpers in tests/support."""
