"""Aligning the parties before training: private set intersection of the ids (psi/)."""
