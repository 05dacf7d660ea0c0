"""`swarm task import` of Python projects: source, layout, stubs, import probe, units, goal."""
