"""Tasks: the goal, the starting repository, the hidden tests, and how to prepare them."""

from swarm.tasks.model import Task, TaskNotPrepared, load_task, parse_budget
from swarm.tasks.prepare import prepare_task
from swarm.tasks.units import (
    Edit,
    Unit,
    UnitAlreadyApplied,
    UnitDoesNotApply,
    apply_unit,
    load_units,
)

__all__ = [
    "Edit",
    "Task",
    "TaskNotPrepared",
    "Unit",
    "UnitAlreadyApplied",
    "UnitDoesNotApply",
    "apply_unit",
    "load_task",
    "load_units",
    "parse_budget",
    "prepare_task",
]
