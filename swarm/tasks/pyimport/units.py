"""Solution units of an imported task: one per stub, merged where edits are too close.

Each stub's unit puts its body back (the stub's raise line → the original body). Two units
whose edits are closer than `MIN_GAP_LINES` in the same file could conflict when both merge, so
they become one unit: in file order, a stub joins the previous one's group when the lines
between them are fewer than the independence check needs (swarm.tasks.units.check_independent).
"""

from __future__ import annotations

from pathlib import Path

from swarm.context.scope import MAX_ITEMS
from swarm.tasks.pyimport.stub import Stub, stub_line
from swarm.tasks.units import MIN_GAP_LINES, Edit, Unit


def module_name(path: str, source_root: str) -> str:
    """`src/cachetools/func.py` → `cachetools.func` (with source root `src`)."""
    relative = Path(path).relative_to(source_root) if source_root else Path(path)
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def group_stubs(stubs: list[Stub], texts: dict[str, str]) -> list[list[Stub]]:
    """The stubs in groups of one file whose raise lines are at least MIN_GAP_LINES apart from
    every other group's (`texts`: each file's stubbed text)."""
    groups: list[list[Stub]] = []
    by_file: dict[str, list[tuple[int, Stub]]] = {}
    for stub in stubs:
        by_file.setdefault(stub.path, []).append((stub_line(texts[stub.path], stub), stub))
    for path in sorted(by_file):
        last_line = None
        for line, stub in sorted(by_file[path], key=lambda item: item[0]):
            # An edit of one line (with its newline) spans it and the next line's start.
            if last_line is not None and line - (last_line + 2) < MIN_GAP_LINES:
                groups[-1].append(stub)
            else:
                groups.append([stub])
            last_line = line
    return groups


def build_units(stubs: list[Stub], texts: dict[str, str], source_root: str) -> list[Unit]:
    """One unit per group of stubs (see group_stubs), in file order."""
    units = []
    for group in group_stubs(stubs, texts):
        first = group[0]
        module = module_name(first.path, source_root)
        names = [s.qualname.split(" ")[0] for s in group]
        unit_id = f"{module}.{first.qualname}".replace(" ", "")
        if len(group) > 1:
            unit_id += f"+{len(group) - 1}"
        shown = ", ".join(dict.fromkeys(names[:3]))
        title = f"implement {module}.{shown}" + (
            f" and {len(group) - 3} more" if len(group) > 3 else ""
        )
        symbols = list(dict.fromkeys(f"{first.path}::{n}" for n in names))
        scope = symbols if len(symbols) <= MAX_ITEMS else [first.path]
        edits = tuple(Edit(s.path, s.stub, s.original) for s in group)
        units.append(Unit(unit_id, title, tuple(scope), edits))
    return units
