"""Training: the bottom party and the top, the epoch/step loop, optimizers and schedules, micro-batches, precision, selection, snapshots, checkpoints."""
