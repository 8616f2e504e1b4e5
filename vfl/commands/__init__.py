"""The party commands: which shared module runs each command of a role (vfl/commands/cli.py)."""
