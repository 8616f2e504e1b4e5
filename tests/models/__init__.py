"""Tests of vfl/models: the registry, the built-in bottoms split as centralized, a user's module, numeric scaling."""
