"""Models: the registry of bottoms and tops by config name (registry), Wide&Deep bottoms, MLP and linear tops."""
