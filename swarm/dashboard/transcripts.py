"""A session's transcript as the dashboard shows it, from what its harness wrote: mini-swe-agent's
trajectory (every message: the model's reasoning and command, the command's output), a CLI
agent's output, or the simulated worker's steps (each hub call and git command, and its answer).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput

STEP_CHARS = 20_000  # characters shown of one step
MAX_STEPS = 3000
_WORKER = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(_text(p.get("text", "")) if isinstance(p, dict) else str(p)
                         for p in content)  # fmt: skip
    return json.dumps(content)


def _clip(text: str) -> str:
    if len(text) <= STEP_CHARS:
        return text
    return text[: STEP_CHARS // 2] + "\n[… cut …]\n" + text[-STEP_CHARS // 2 :]


def _steps(path: Path) -> list[dict[str, str]]:
    name = path.name
    raw = path.read_text(encoding="utf-8", errors="replace")
    if name.endswith(".traj.json"):
        messages = json.loads(raw).get("messages", [])
        return [{"role": str(m.get("role", "?")), "text": _clip(_text(m.get("content", "")))}
                for m in messages if isinstance(m, dict)]  # fmt: skip
    if name.endswith(".sim.json"):
        steps: list[dict[str, str]] = []
        for s in json.loads(raw).get("steps", []):
            steps += [{"role": "command", "text": str(s.get("command", ""))},
                      {"role": "output", "text": _clip(str(s.get("output", "")))}]  # fmt: skip
        return steps
    role = "stderr" if name.endswith(".stderr.log") else "output"
    return [{"role": role, "text": _clip(raw)}] if raw.strip() else []


def transcript(sessions_dir: Path, worker: str, number: int) -> dict[str, Any]:
    """Every step its harness recorded for `worker`'s session `number` (none when it wrote no
    transcript: a run without a log directory, or a session still under way for mini)."""
    if not _WORKER.fullmatch(worker):
        raise InvalidInput(f"{worker!r} is not a worker name (letters, digits, '-', '_')")
    files = (
        sorted(sessions_dir.glob(f"{worker}-session{int(number)}.*"))
        if sessions_dir.is_dir()
        else []
    )
    steps: list[dict[str, str]] = []
    for path in files:
        try:
            steps += _steps(path)
        except (OSError, ValueError, AttributeError) as exc:
            steps.append({"role": "error", "text": f"{path.name} cannot be read: {exc}"})
    return {"worker": worker, "number": number, "files": [p.name for p in files],
            "steps": steps[:MAX_STEPS], "more": max(0, len(steps) - MAX_STEPS)}  # fmt: skip
