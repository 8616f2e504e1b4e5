"""Label DP: randomized response, RRWithPrior, the keyed PRF, the key-and-ledger store and the LabelDP API.

It also holds the once-per-release draws and the debiased validation metrics."""
