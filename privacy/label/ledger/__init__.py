"""The label-DP ledger and its store: every release of the leader's labels, recorded before it is drawn."""
