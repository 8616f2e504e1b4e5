"""Configuration: the party YAML schema (pydantic), its problem report, and YAML reading; `python -m vfl.config`."""
