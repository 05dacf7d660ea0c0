"""Preparer `hazard`: a seeded workload with the coordination problems real projects have.

Every unit implements one function `fNN(x)` of the package `hz`; on top of that:

- hotspots: a unit may also add a line to shared files (`hz/registry.py`'s REGISTRY,
  `hz/__init__.py`'s exports, `hz/cli.py`'s COMMANDS), each just above the same marker line,
  so two such changes made side by side conflict until one merges main and re-applies;
- dependency chains: a unit's function calls an earlier unit's, so its check fails with that
  unit's NotImplementedError until the earlier one is merged;
- pitfalls: a unit's check demands a special case (negative input must raise, large results
  are reduced modulo 997) that a first attempt misses with probability `failure_odds`, unless
  it knows the reason a peer recorded as a FAIL;
- hidden scopes: a unit's function is defined in another unit's module (the goal names its own
  module, which only re-exports it); its real file is known from what peers recorded, or found
  by an investigation that takes `investigate` times as long as the work.

`checks/<unit>.py` in the start is each unit's visible check; the hidden tests check the same,
one test per unit. The start scores 0; all units applied score all. Solution units carry their
hazards (key `hazard`) for the sim harness (swarm.harness.sim_hazard); `parse_units` ignores it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.tasks.model import TASK_FILE
from swarm.tasks.prepare import Say, write_files

PARTS = ["start", "hidden", "solution", "goal.md"]
MODULO = 997
# (file, the marker each unit's line goes above, the line for a unit)
HOTSPOTS = (
    (
        "hz/registry.py",
        "    # one line per unit, above this comment\n",
        '    "{u}": "hz.m{n}:f{n}",\n',
    ),
    ("hz/__init__.py", "# one import per unit, above this comment\n", "from hz.m{n} import f{n}\n"),
    ("hz/cli.py", "    # one command per unit, above this comment\n", '    "f{n}": "run f{n}",\n'),
)
HOTSPOT_HEADS = {
    "hz/registry.py": '"""Which function serves each unit."""\n\nREGISTRY: dict[str, str] = {\n',
    "hz/__init__.py": '"""hz: one function per unit."""\n\n',
    "hz/cli.py": '"""The command table of the hz tool."""\n\nCOMMANDS: dict[str, str] = {\n',
}
HOTSPOT_TAILS = {"hz/registry.py": "}\n", "hz/__init__.py": "", "hz/cli.py": "}\n"}
DEFAULTS: dict[str, Any] = {
    "seed": 1,
    "units": 48,
    "hotspots": 3,  # how many of the shared files exist (1 to 3)
    "hotspot_rate": 0.35,  # chance a unit touches each shared file
    "chain_rate": 0.3,  # chance a unit calls an earlier unit's function
    "failure_rate": 0.3,  # share of units with a pitfall
    "failure_odds": 0.8,  # chance an attempt that does not know the reason falls in
    "hidden_rate": 0.15,  # share of units defined in another unit's module
    "investigate": 3.0,  # a hidden unit found without the context: this many times the work
}
MAX_UNITS = 999


@dataclass
class _Unit:
    n: str  # "07"
    a: int
    b: int
    needs: str | None = None  # the unit whose function this one calls
    pitfall: str | None = None  # "negative" | "modulo"
    host: str | None = None  # the unit whose module defines this one's function
    hotspots: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"h{self.n}"

    @property
    def home(self) -> str:
        return f"hz/m{self.host or self.n}.py"


def options_of(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The preparer's options with defaults, checked: a wrong one names the field and range."""
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise InvalidInput(
            f"{where}: prepare_options.{unknown[0]} is not a hazard option "
            f"(known: {', '.join(sorted(DEFAULTS))})"
        )
    got = {**DEFAULTS, **raw}
    for key in ("seed", "units", "hotspots"):
        if not isinstance(got[key], int) or isinstance(got[key], bool):
            raise InvalidInput(f"{where}: prepare_options.{key} must be an integer")
    if not 1 <= got["units"] <= MAX_UNITS:
        raise InvalidInput(f"{where}: prepare_options.units must be 1 to {MAX_UNITS}")
    if not 0 <= got["hotspots"] <= len(HOTSPOTS):
        raise InvalidInput(f"{where}: prepare_options.hotspots must be 0 to {len(HOTSPOTS)}")
    for key in ("hotspot_rate", "chain_rate", "failure_rate", "failure_odds", "hidden_rate"):
        value = got[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InvalidInput(f"{where}: prepare_options.{key} must be a number from 0 to 1")
    if isinstance(got["investigate"], bool) or not isinstance(got["investigate"], int | float):
        raise InvalidInput(f"{where}: prepare_options.investigate must be a number")
    if got["investigate"] < 1:
        raise InvalidInput(f"{where}: prepare_options.investigate must be at least 1")
    return got


def plan_units(o: Mapping[str, Any]) -> list[_Unit]:
    """The units and their hazards, drawn from the seed alone."""
    rng = random.Random(f"hazard-{o['seed']}")
    width = max(2, len(str(o["units"])))
    units = [
        _Unit(f"{i:0{width}d}", rng.randint(2, 9), rng.randint(0, 10))
        for i in range(1, o["units"] + 1)
    ]
    files = [h[0] for h in HOTSPOTS[: o["hotspots"]]]
    for i, unit in enumerate(units):
        unit.hotspots = [f for f in files if rng.random() < o["hotspot_rate"]]
        if i and rng.random() < o["chain_rate"]:
            unit.needs = units[rng.randrange(max(0, i - 8), i)].n
        if rng.random() < o["failure_rate"]:
            unit.pitfall = rng.choice(("negative", "modulo"))
    hosts = [u for u in units if rng.random() >= o["hidden_rate"]] or units[:1]
    for unit in units:
        if unit not in hosts:
            unit.host = rng.choice(hosts).n
    return units


def _value(units: dict[str, _Unit], n: str, x: int) -> int:
    u = units[n]
    total = u.a * x + u.b + (_value(units, u.needs, x) if u.needs else 0)
    return total % MODULO if u.pitfall == "modulo" else total


def _body(u: _Unit, *, naive: bool = False) -> str:
    lines = [f"    from hz.m{u.needs} import f{u.needs}\n\n"] if u.needs else []
    if u.pitfall == "negative" and not naive:
        lines.append('    if x < 0:\n        raise ValueError("x must be >= 0")\n')
    result = f"{u.a} * x + {u.b}" + (f" + f{u.needs}(x)" if u.needs else "")
    if u.pitfall == "modulo" and not naive:
        result = f"({result}) % {MODULO}"
    lines.append(f"    return {result}\n")
    return "".join(lines)


def _stub(u: _Unit) -> str:
    return f'    raise NotImplementedError("f{u.n}")\n'


def _function(u: _Unit) -> str:
    uses = f" + f{u.needs}(x)" if u.needs else ""
    return (
        f"\n\ndef f{u.n}(x: int) -> int:\n"
        f'    """Unit {u.id}: return {u.a} * x + {u.b}{uses}; `python checks/{u.id}.py` '
        'checks it."""\n' + _stub(u)
    )


def _check(u: _Unit, units: dict[str, _Unit]) -> str:
    """The unit's visible check: a script that prints one line and exits 1 on failure."""
    xs = (0, 1, 5) + ((1000,) if u.pitfall == "modulo" else ())
    asserts = [f"    from hz.m{u.n} import f{u.n}\n"]
    for x in xs:
        want = _value(units, u.n, x)
        why = f"must be reduced modulo {MODULO}" if x == 1000 else f"should be {want}"
        asserts.append(
            f'    got = f{u.n}({x})\n    assert got == {want}, f"f{u.n}({x}) {why}, got {{got}}"\n'
        )
    if u.pitfall == "negative":
        asserts.append(
            f"    try:\n        f{u.n}(-1)\n    except ValueError:\n        pass\n    else:\n"
            f'        raise AssertionError("f{u.n}(-1) must raise ValueError (negative input)")\n'
        )
    for path, _marker, line in HOTSPOTS:
        if path in u.hotspots:
            text = line.format(u=u.id, n=u.n).strip()
            asserts.append(
                f"    text = open({path!r}, encoding='utf-8').read()\n"
                f"    assert {text!r} in text, {f'{u.id} is missing from {path}: add {text}'!r}\n"
            )
    return (
        f'"""The check of unit {u.id}: `python checks/{u.id}.py` from the repository root."""\n\n'
        "import sys\n\nsys.path.insert(0, '.')\n\n\ndef main() -> None:\n"
        + "".join(asserts)
        + "\n\ntry:\n    main()\nexcept Exception as exc:\n"
        f'    print(f"FAIL {u.id}: {{type(exc).__name__}}: {{exc}}")\n    sys.exit(1)\n'
        f'print("ok {u.id}")\n'
    )


def _unit_json(u: _Unit, o: Mapping[str, Any]) -> dict[str, Any]:
    edits = [{"path": u.home, "old": _stub(u), "new": _body(u)}]
    for path, marker, line in HOTSPOTS:
        if path in u.hotspots:
            edits.append({"path": path, "old": marker, "new": line.format(u=u.id, n=u.n) + marker})
    reasons = {
        "negative": f"f{u.n}(-1) must raise ValueError (negative input), says checks/{u.id}.py",
        "modulo": f"f{u.n}'s result must be reduced modulo {MODULO}, says checks/{u.id}.py",
    }
    hazard: dict[str, Any] = {
        "function": f"f{u.n}",
        "file": f"hz/m{u.n}.py",
        "real_file": u.home,
        "check": f"checks/{u.id}.py",
        "needs": [f"h{u.needs}"] if u.needs else [],
        "hotspots": list(u.hotspots),
        "odds": float(o["failure_odds"]),
        "investigate": float(o["investigate"]),
        "seed": int(o["seed"]),
    }
    if u.pitfall:
        hazard["pitfall"] = {"reason": reasons[u.pitfall], "naive": _body(u, naive=True)}
    return {
        "id": u.id,
        "title": f"implement f{u.n}",
        "scope": [f"{u.home}::f{u.n}", *u.hotspots],
        "edits": edits,
        "hazard": hazard,
    }


def write_hazard_parts(root: Path, options: Mapping[str, Any]) -> list[str]:
    o = options_of(options, str(root / TASK_FILE))
    units = plan_units(o)
    by_n = {u.n: u for u in units}
    modules: dict[str, list[str]] = {f"hz/m{u.n}.py": [f'"""Unit {u.id}."""\n'] for u in units}
    for u in units:
        modules[u.home].append(_function(u))
        if u.host:
            modules[f"hz/m{u.n}.py"].append(f"\nfrom hz.m{u.host} import f{u.n}  # noqa: F401\n")
    files: dict[str, str | bytes] = {path: "".join(parts) for path, parts in modules.items()}
    for path, marker, _line in HOTSPOTS[: o["hotspots"]]:
        files[path] = HOTSPOT_HEADS[path] + marker + HOTSPOT_TAILS[path]
    files.setdefault("hz/__init__.py", HOTSPOT_HEADS["hz/__init__.py"])
    files |= {f"checks/{u.id}.py": _check(u, by_n) for u in units}
    files[".gitignore"] = "__pycache__/\n"
    files["README.md"] = "# hz\n\nOne function per unit; `python checks/<unit>.py` checks one.\n"
    write_files(root / "start", files)
    tests = (
        '"""Hidden tests: one per unit; each runs the unit\'s check as it was written."""\n\n'
        "import runpy\nimport sys\n\nimport pytest\n\n"
        f"CHECKS = {json.dumps({u.id: _check(u, by_n) for u in units}, indent=1)}\n\n\n"
        f"@pytest.mark.parametrize('unit', {json.dumps([u.id for u in units])})\n"
        "def test_unit(unit, tmp_path, capsys):\n"
        "    # The hidden copy of the check, not the checkout's (an agent may have edited it).\n"
        "    script = tmp_path / f'{unit}.py'\n"
        "    script.write_text(CHECKS[unit], encoding='utf-8')\n"
        "    for name in [m for m in sys.modules if m == 'hz' or m.startswith('hz.')]:\n"
        "        del sys.modules[name]\n"
        "    try:\n"
        "        runpy.run_path(str(script), run_name='__main__')\n"
        "    except SystemExit as exit:\n"
        "        if exit.code:\n"
        "            pytest.fail(capsys.readouterr().out.strip() or f'exit {exit.code}')\n"
    )
    write_files(root / "hidden", {"test_hazard.py": tests, "pytest.ini": "[pytest]\n"})
    write_files(
        root / "solution", {"units.json": json.dumps([_unit_json(u, o) for u in units], indent=1)}
    )
    (root / "goal.md").write_text(_goal(units), encoding="utf-8")
    return PARTS


def _goal(units: list[_Unit]) -> str:
    lines = [
        "# Goal: implement every function of `hz`\n",
        "Each unit `hNN` is a function `fNN(x: int) -> int` in `hz/mNN.py` whose body raises "
        "`NotImplementedError`. Make it return what is listed below, and make the unit's "
        "check pass: `python checks/hNN.py` (run from the repository root) names anything "
        "else the unit needs, such as its line in `hz/registry.py`, `hz/__init__.py` or "
        "`hz/cli.py`. A hidden test per unit checks the same.\n",
    ]
    for u in units:
        uses = f" + f{u.needs}(x)" if u.needs else ""
        lines.append(f"- `{u.id}`: `hz/m{u.n}.py`: `f{u.n}(x)` returns `{u.a} * x + {u.b}{uses}`")
    return "\n".join(lines) + "\n"


def prepare_hazard(root: Path, options: Mapping[str, Any], *, force: bool, say: Say) -> list[str]:
    """Preparer `hazard`: write the seeded hazard workload into `root`."""
    parts = write_hazard_parts(root, options)
    o = options_of(options, str(root / TASK_FILE))
    say(f"wrote a hazard task with {o['units']} units (seed {o['seed']}): {', '.join(parts)}")
    return parts
