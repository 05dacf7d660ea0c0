"""The evaluator: scores `main` with the hidden tests, outside the swarm."""

from swarm.evaluation.evaluate import Checkpoint, evaluate
from swarm.evaluation.evaluator import Evaluator
from swarm.evaluation.parse import parse_counts

__all__ = ["Checkpoint", "Evaluator", "evaluate", "parse_counts"]
