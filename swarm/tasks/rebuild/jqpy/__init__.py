"""jq 1.6's command line in Python, over jq's own C library: the jq task's reference solution.

It is what the simulated harness replays so that a run can reach every hidden test: jq's
engine (libjq, shipped as base64 beside native.py) does the work and this package is a port
of jq's main.c. It is not a rebuild of jq in Python, and agents never see the library.
"""
