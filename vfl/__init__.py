"""Vertical split learning core: config, data, models, wire and the centralized reference."""
