"""Label DP: randomized response (binary, k-ary), RRWithPrior, the leader's keyed PRF, the key-and-ledger store,
the once-per-release draws, debiased validation metrics, and the LabelDP API."""
