"""The live dashboard, served by the hub: an overview, browsers, and operator controls."""

from swarm.dashboard.routes import mount

__all__ = ["mount"]
