"""Online scoring: long-running parties that score ids, the leader behind a local HTTP JSON endpoint."""
