"""Label-leakage attacks on what a follower sees: gradient scoring, K-class directions, the follower full-view replay; `python -m privacy.attacks`."""
