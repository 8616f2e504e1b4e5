"""Synthetic and bundled example data: Criteo-format binary and K-class generators, scikit-learn's digits split in two."""
