"""The label party: top model, loss, label DP and the gradients returned to followers."""
