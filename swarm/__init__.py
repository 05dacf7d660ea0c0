"""swarm: a decentralized, self-organizing team of coding agents working on one goal."""

__version__ = "0.1.0"
__all__ = ["__version__"]
