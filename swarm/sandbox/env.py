"""The environment of an agent's commands: built from an allow-list, never from `os.environ`.

The worker process may hold secrets an agent must never see (the join token; in a container,
whatever the deployment passed it): only what is named here crosses into a sandbox.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# Taken from the worker's environment when set: harmless settings of the terminal and locale.
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "COLUMNS")
# What a CLI agent needs to reach its model, passed only to the CLI harnesses (mini calls the
# model from outside the sandbox, so its commands get no provider key at all).
PROVIDER_KEYS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
)
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def sw_bin_dir() -> str:
    """The directory holding the `sw` command of this installation."""
    found = shutil.which("sw", path=str(Path(sys.executable).parent))
    return str(Path(found).parent) if found else str(Path(sys.executable).parent)


def base_env(
    *,
    home: str = "/tmp",
    pass_through: Iterable[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What every command in a sandbox gets (no hub, no token): the system's and this
    installation's programs, a home in the private /tmp, quiet tools. `pass_through` names more
    variables to copy from `source` (default: this process's environment) when they are set."""
    source = os.environ if source is None else source
    env = {
        "PATH": os.pathsep.join([sw_bin_dir(), *SYSTEM_PATH]),
        "HOME": home,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_EDITOR": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        # Nothing waits on a terminal: pagers print, progress bars stay quiet.
        "PAGER": "cat",
        "MANPAGER": "cat",
        "LESS": "-R",
        "PIP_PROGRESS_BAR": "off",
        "TQDM_DISABLE": "1",
    }
    for name in (*PASSED_THROUGH, *pass_through):
        if name in source:
            env[name] = source[name]
    return env


def agent_env(
    *,
    hub_url: str,
    token: str,
    worker: str,
    home: str = "/tmp",
    extra: Mapping[str, str] | None = None,
    pass_through: Iterable[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of an agent's commands: `base_env` with the hub's URL and the
    worker's own token (what `sw` needs), and `extra`."""
    env = base_env(home=home, pass_through=pass_through, source=source)
    env.update(SWARM_HUB_URL=hub_url, SWARM_TOKEN=token, SWARM_WORKER=worker)
    env.update(extra or {})
    return env
