"""Horizontal (FedAvg) mechanisms: SignDS with MagRR, Gaussian and Laplace noise, NbAFL, pairwise-mask secure aggregation."""
