"""What the switch-aware sim policy (swarm.harness.sim_hazard) knows of a unit: its edits and,
for a hazard task (swarm.tasks.hazard), its hazards; how to apply it, and whether main has it."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.sandbox import Box
from swarm.sandbox import popen as popen_in
from swarm.tasks.units import Edit, Unit, parse_units


@dataclass(frozen=True)
class Hazards:
    """A unit's hazards; a plain unit (demo, scale) has none."""

    function: str = ""
    file: str = ""  # where the goal says the unit's function is
    real_file: str = ""  # where it is (differs for a hidden scope)
    check: str = ""  # the unit's visible check, run from the checkout's root
    needs: tuple[str, ...] = ()
    hotspots: tuple[str, ...] = ()
    pitfall: str = ""  # the reason a first attempt fails, as a FAIL would record it
    naive: str = ""  # the body such an attempt writes
    odds: float = 0.0  # chance an attempt that does not know the reason falls in
    investigate: float = 1.0  # a hidden scope found without help: this many times the work
    seed: int = 0


@dataclass(frozen=True)
class SimUnit:
    unit: Unit
    hazards: Hazards = field(default_factory=Hazards)

    @property
    def id(self) -> str:
        return self.unit.id

    @property
    def hidden(self) -> bool:
        return self.hazards.file != self.hazards.real_file

    def is_hotspot_edit(self, edit: Edit) -> bool:
        return edit.path in self.hazards.hotspots and edit.new.endswith(edit.old)


def load_sim_units(text: str, source: str = "units.json") -> list[SimUnit]:
    units = parse_units(text, source)
    raw = json.loads(text)
    out = []
    for unit, item in zip(units, raw, strict=True):
        h = item.get("hazard") or {}
        pitfall = h.get("pitfall") or {}
        out.append(
            SimUnit(
                unit,
                Hazards(
                    function=str(h.get("function", "")),
                    file=str(h.get("file", "")),
                    real_file=str(h.get("real_file", h.get("file", ""))),
                    check=str(h.get("check", "")),
                    needs=tuple(h.get("needs", ())),
                    hotspots=tuple(h.get("hotspots", ())),
                    pitfall=str(pitfall.get("reason", "")),
                    naive=str(pitfall.get("naive", "")),
                    odds=float(h.get("odds", 0.0)),
                    investigate=float(h.get("investigate", 1.0)),
                    seed=int(h.get("seed", 0)),
                ),
            )
        )
    return out


def is_hazard_task(text: str) -> bool:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(raw, list) and any(isinstance(u, dict) and "hazard" in u for u in raw)


def apply(unit: SimUnit, root: Path, *, naive: bool = False) -> list[str]:
    """Apply the unit's edits that are not there yet (a hotspot line goes above its marker,
    wherever peers' lines are); answers the paths changed, [] when main already had it all."""
    changed: dict[Path, str] = {}
    for edit in unit.unit.edits:
        path = root / edit.path
        text = changed.get(path, path.read_text(encoding="utf-8"))
        if unit.is_hotspot_edit(edit):
            line = edit.new[: -len(edit.old)]
            if line in text or edit.old not in text:
                continue
            changed[path] = text.replace(edit.old, edit.new, 1)
        elif edit.old in text:
            new = unit.hazards.naive if naive and unit.hazards.naive else edit.new
            changed[path] = text.replace(edit.old, new, 1)
    for path, text in changed.items():
        path.write_text(text, encoding="utf-8")
    return sorted(str(p.relative_to(root)) for p in changed)


def on_main(units: list[SimUnit], texts: dict[str, str]) -> set[str]:
    """The units whose every edit is in `texts` (path -> content of main)."""
    done = set()
    for unit in units:
        ok = True
        for edit in unit.unit.edits:
            text = texts.get(edit.path)
            if text is None:
                ok = False
            elif unit.is_hotspot_edit(edit):
                ok = ok and edit.new[: -len(edit.old)] in text
            else:
                ok = ok and edit.old not in text
        if ok:
            done.add(unit.id)
    return done


def read_files(box: Box, rev: str, paths: list[str]) -> dict[str, str]:
    """Files of `rev`'s tree, read from git's objects in one process."""
    if not paths:
        return {}
    process = popen_in(
        box,
        ["git", "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = process.communicate("".join(f"{rev}:{p}\n" for p in paths).encode())
    if process.returncode != 0:
        raise RuntimeError(f"git cat-file --batch: {err.decode(errors='replace')[-400:]}")
    texts: dict[str, str] = {}
    at = 0
    for path in paths:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            texts[path] = out[at : at + size].decode("utf-8", errors="replace")
            at += size + 1
    return texts


UNIT_RE = re.compile(r"\bunit (h?\w+)\b")
NEEDS_RE = re.compile(r"needs unit (\S+?) merged")
HOME_RE = re.compile(r"is defined in (\S+\.py)")


@dataclass
class Knowledge:
    """What a worker knows in one session (a fresh session starts from the hub alone)."""

    done: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)  # unit -> a pitfall's reason
    needs: dict[str, set[str]] = field(default_factory=dict)  # unit -> units it waits for
    homes: dict[str, str] = field(default_factory=dict)  # unit -> its real file
    deferred: dict[str, float] = field(default_factory=dict)  # unit -> left alone until then

    def learn(self, entries: Iterable[Mapping[str, Any]], units: Mapping[str, object]) -> None:
        """What peers' entries say about the units: merged (PATCH_SUMMARY), waiting for another
        unit or a pitfall's reason (FAIL), a hidden unit's real file (OBSERVED, FACT)."""
        for entry in entries:
            body, kind = str(entry.get("body", "")), entry.get("type")
            found = UNIT_RE.search(body)
            if not found or found.group(1) not in units:
                continue
            unit = found.group(1)
            if kind == "PATCH_SUMMARY":
                self.done.add(unit)
            elif kind == "FAIL" and (need := NEEDS_RE.search(body)):
                self.needs.setdefault(unit, set()).add(need.group(1))
            elif kind == "FAIL" and "pitfall:" in body:
                self.reasons[unit] = body.split("pitfall:", 1)[1].strip()
            elif kind in ("OBSERVED", "FACT") and (home := HOME_RE.search(body)):
                self.homes[unit] = home.group(1)


def attempt_record(**fields: Any) -> str:
    return json.dumps(fields, sort_keys=True) + "\n"
