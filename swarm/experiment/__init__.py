"""Experiments: a grid of runs (swarm experiment) and its statistics (swarm report)."""
