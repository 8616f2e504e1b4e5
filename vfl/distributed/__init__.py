"""Data parallelism inside a party: N ranks under torchrun, rank r of the leader paired with rank r of every follower.

launch.py reads torchrun's environment without importing torch; context.py starts the process group and
holds the few collectives training needs; slicing.py cuts each global batch into rank slices; pairing.py
derives each rank's endpoint and checks that the parties agree on N and on the pairing.
N = 1 (no WORLD_SIZE, or WORLD_SIZE=1) is the single-process path: no torch.distributed at all.
"""
