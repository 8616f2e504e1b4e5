"""Presets of the table schema: column layouts that the framework knows by name (Criteo)."""
