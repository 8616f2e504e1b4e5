"""Label DP in training: the release (eps, mechanism, flip probability or transition, prior, release id), the noise-corrected losses, LP-2ST priors, ranks."""
