"""Recipes: what the Debian importer must know of one program beyond its packages.

A recipe says where the source package keeps its own test suite and how to turn it into
command-line tests, where the manual is, how the rebuilt program is run, and optionally how to
build a reference solution the simulated harness can replay. Recipes are named by the binary
package that holds the program and imported lazily.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from swarm.errors import InvalidInput
from swarm.tasks.units import Unit

RECIPES: dict[str, str] = {
    "jq": "swarm.tasks.rebuild.jq_recipe:RECIPE",
}


@dataclass(frozen=True)
class Manual:
    title: str
    markdown: str
    sections: tuple[str, ...]


class Recipe(Protocol):
    package: str  # the binary package holding the program
    program: str  # the command: /usr/bin/<program> in that package
    language: str  # what the rebuild is written in, for the goal
    implementation: str  # how the rebuild is run from the repository's top folder
    example: str  # arguments of a sample `sw oracle` call, for the goal
    has_reference: bool  # whether `reference` builds solution units

    def tests(self, source: Path) -> list[dict[str, Any]]:
        """The source package's own tests, in swarm.evaluation.cli_tests' format."""
        ...

    def describe_tests(self, count: int) -> str:
        """A paragraph of the goal: what the hidden tests run and compare."""
        ...

    def manual(self, source: Path, upstream: str) -> Manual: ...

    def reference(self, unpacked: Path, say: Callable[[str], None]) -> list[Unit] | None:
        """Solution units from the unpacked binary packages, or None when there is none."""
        ...


def recipe_for(package: str) -> Recipe:
    """The recipe of `package`, or InvalidInput naming those there are."""
    target = RECIPES.get(package)
    if target is None:
        raise InvalidInput(
            f"unknown test format: swarm cannot yet turn {package}'s own test suite into "
            f"command-line tests (it can for: {', '.join(sorted(RECIPES))}). A recipe "
            "(swarm/tasks/rebuild/recipes.py) says where a package keeps its tests, how to "
            "read them and where its manual is"
        )
    module_name, _, attribute = target.partition(":")
    recipe: Recipe = getattr(importlib.import_module(module_name), attribute)
    return recipe
