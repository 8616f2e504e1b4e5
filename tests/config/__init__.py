"""Tests of vfl/config: validation, the schema, overrides and its JSON Schema export."""
