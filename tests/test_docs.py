"""Every command has help, and every `swarm` command is documented in the README."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from swarm.cli import main as swarm_cli
from swarm.tools.sw import sw as sw_cli

ROOT = Path(__file__).resolve().parent.parent


def walk(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            found += walk(command, f"{prefix} {name}")
    return found


def test_every_command_answers_help() -> None:
    runner = CliRunner()
    for path, command in walk(swarm_cli, "swarm") + walk(sw_cli, "sw"):
        assert command.help, f"{path} has no help text"
        group = swarm_cli if path.startswith("swarm") else sw_cli
        result = runner.invoke(group, [*path.split()[1:], "--help"])
        assert result.exit_code == 0, f"{path} --help failed: {result.output}"


def test_every_swarm_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in swarm_cli.commands:
        assert f"swarm {name}" in readme, f"README does not mention `swarm {name}`"


def test_every_sw_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in sw_cli.commands:
        assert f"`{name}`" in readme or f"sw {name}" in readme, f"README lacks sw {name}"
