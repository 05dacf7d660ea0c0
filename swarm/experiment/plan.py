"""An experiment's plan (PLAN.toml): the grid of task × setup × workers × ablation × seed.

    name = "hazard-ablations"             # default: the file's name
    tasks = ["../tasks/hazard"]           # or task = "..."; relative to the plan file
    workers = [1, 4, 16]
    without = ["", "context", "claims"]   # "" = every mechanism on; "claims,dms" = both off
    repeats = 3                           # or seeds = [1, 2, 3]
    baseline = ""                         # the ablation (or {without=, setup=}) compared against
    max_cost = 50.0                       # dollars for the whole grid: no new run past it

    [[setups]]                            # default: one, harness = "sim"
    name = "mini"
    harness = "mini"
    model = "openai/gpt-4.1-mini"

    [run]                                 # options of every `swarm run`
    budget = "10m"
    think = 1.0
    eval_every = "5s"
    max_cost = 2.0                        # dollars per run

    [prepare_options]                     # overrides of a seeded task's options (hazard)
    units = 24

Every mistake is refused with the key, what was wrong and what to write instead.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput, NotFound
from swarm.switches import parse_without

TOP_KEYS = ("name", "task", "tasks", "workers", "without", "repeats", "seeds", "baseline",
            "setups", "harness", "model", "model_mix", "api_base", "run", "prepare_options",
            "max_cost")  # fmt: skip
SETUP_KEYS = ("name", "harness", "model", "model_mix", "api_base")
RUN_KEYS = ("budget", "think", "eval_every", "max_cost", "sandbox", "processes", "merge_check",
            "required_approvals", "database_url")  # fmt: skip
RUN_DEFAULTS: dict[str, Any] = {"budget": "10m", "think": 1.0, "eval_every": "10s"}


@dataclass(frozen=True)
class Setup:
    """A harness and its model(s): one value of the plan's setup axis."""

    name: str
    harness: str = "sim"
    model: str | None = None
    model_mix: str | None = None
    api_base: str | None = None

    @property
    def uses_model(self) -> bool:
        return self.harness != "sim"


@dataclass(frozen=True)
class Config:
    """One cell of the grid; its runs are its repeats (one per seed)."""

    task: str  # the task's name (the folder's)
    setup: str
    workers: int
    without: tuple[str, ...]

    @property
    def ablation(self) -> str:
        return ablation_label(self.without)

    @property
    def label(self) -> str:
        return f"{self.task} · {self.setup} · {self.workers}w · {self.ablation}"

    @property
    def slug(self) -> str:
        off = "all" if not self.without else "no-" + "+".join(self.without)
        return f"{self.task}-{self.setup}-w{self.workers}-{off}"


@dataclass(frozen=True)
class RunSpec:
    config: Config
    seed: int

    @property
    def id(self) -> str:
        return f"{self.config.slug}-s{self.seed}"


@dataclass
class Plan:
    name: str
    path: Path
    tasks: dict[str, Path]  # name -> folder
    workers: list[int]
    without: list[tuple[str, ...]]
    seeds: list[int]
    setups: list[Setup]
    baseline_without: tuple[str, ...]
    baseline_setup: str
    run: dict[str, Any] = field(default_factory=dict)
    prepare_options: dict[str, Any] = field(default_factory=dict)
    max_cost: float | None = None

    @property
    def configs(self) -> list[Config]:
        return [Config(t, s.name, w, off) for t in self.tasks for s in self.setups
                for w in self.workers for off in self.without]  # fmt: skip

    def runs(self) -> list[RunSpec]:
        """Every run, a whole repeat (seed) after another: an interrupted grid has its first
        repeats complete."""
        return [RunSpec(c, seed) for seed in self.seeds for c in self.configs]

    def setup(self, name: str) -> Setup:
        return next(s for s in self.setups if s.name == name)

    def baseline_of(self, config: Config) -> Config:
        """The configuration `config` is compared against: the baseline's ablation and setup
        at the same task and number of workers."""
        return Config(config.task, self.baseline_setup, config.workers, self.baseline_without)

    @property
    def varied(self) -> set[str]:
        """The plan's axes with more than one value."""
        axes = {"task": self.tasks, "setup": self.setups, "workers": self.workers,
                "without": self.without, "seed": self.seeds}  # fmt: skip
        return {name for name, values in axes.items() if len(values) > 1}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": {k: str(v) for k, v in self.tasks.items()},
            "workers": self.workers,
            "without": [list(w) for w in self.without],
            "seeds": self.seeds,
            "setups": [asdict(s) for s in self.setups],
            "baseline": {"without": list(self.baseline_without), "setup": self.baseline_setup},
            "run": self.run,
            "prepare_options": self.prepare_options,
            "max_cost": self.max_cost,
        }

    def fingerprint(self) -> str:
        """What must not change for an experiment directory to be resumed with this plan."""
        data = self.to_json()
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def ablation_label(without: tuple[str, ...] | list[str]) -> str:
    return "all on" if not without else "without " + "+".join(without)


def _fail(path: Path, key: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path}: {key} {message}")


def _unknown(path: Path, where: str, got: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(got) - set(known))
    if unknown:
        raise InvalidInput(
            f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"
            f"{' in ' + where if where else ''}; known: {', '.join(known)}"
        )


def _axis(path: Path, raw: dict[str, Any], key: str, default: list[Any] | None = None) -> list[Any]:
    value = raw.get(key, default)
    if value is None:
        raise _fail(path, f"'{key}'", "is missing; give a list, e.g. " + {
            "workers": "workers = [1, 4, 16]"}.get(key, f"{key} = [...]"))  # fmt: skip
    if not isinstance(value, list):
        value = [value]
    if not value:
        raise _fail(path, f"'{key}'", "is empty; give at least one value")
    if len(set(map(repr, value))) != len(value):
        raise _fail(path, f"'{key}'", f"repeats a value ({value}); give each once")
    return value


def _ints(path: Path, key: str, values: list[Any], low: int) -> list[int]:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise _fail(path, f"'{key}'", f"holds {v!r}; give whole numbers of at least {low}")
    return [int(v) for v in values]


def _switches(path: Path, value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise _fail(path, "'without'", f'holds {value!r}; give strings such as "claims,dms"')
    text = "" if value.strip().lower() in ("all", "all on", "none", "-") else value
    try:
        return parse_without(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: 'without': {exc.message}") from None


def _setups(path: Path, raw: dict[str, Any]) -> list[Setup]:
    from swarm.harness import HARNESSES

    single = {k: raw[k] for k in ("harness", "model", "model_mix", "api_base") if k in raw}
    if "setups" in raw and single:
        raise InvalidInput(
            f"{path}: give either [[setups]] or top-level {', '.join(single)}, not both"
        )
    tables = raw.get("setups", [single])
    if not isinstance(tables, list) or not tables:
        raise _fail(path, "'setups'", "is empty; give at least one [[setups]] table")
    setups = []
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            raise _fail(path, "'setups'", "must be tables ([[setups]])")
        _unknown(path, f"[[setups]] #{i + 1}", table, SETUP_KEYS)
        harness = str(table.get("harness", "sim"))
        if harness not in HARNESSES:
            raise InvalidInput(
                f"{path}: setup #{i + 1}: unknown harness {harness!r}; choose one of "
                f"{', '.join(sorted(HARNESSES))}"
            )
        if harness == "mini" and not (table.get("model") or table.get("model_mix")):
            raise InvalidInput(
                f"{path}: setup #{i + 1}: harness mini needs a model: add model = "
                '"openai/gpt-4.1-mini" (any litellm model string) or model_mix'
            )
        default = harness if not table.get("model") else (
            f"{harness}-{str(table['model']).split('/')[-1]}")  # fmt: skip
        name = str(table.get("name") or default)
        setups.append(Setup(name, harness, table.get("model"), table.get("model_mix"),
                            table.get("api_base")))  # fmt: skip
    names = [s.name for s in setups]
    if len(set(names)) != len(names):
        raise _fail(path, "'setups'", f"repeat a name ({', '.join(names)}); name each one")
    return setups


def _run_options(path: Path, raw: Any) -> dict[str, Any]:
    from swarm.sandbox import SANDBOXES
    from swarm.tasks.model import parse_budget

    if not isinstance(raw, dict):
        raise _fail(path, "[run]", "must be a table")
    _unknown(path, "[run]", raw, RUN_KEYS)
    options = {**RUN_DEFAULTS, **raw}
    for key in ("budget", "eval_every"):
        try:
            parse_budget(options[key])
        except InvalidInput as exc:
            raise InvalidInput(f"{path}: [run] {key}: {exc.message}") from None
    for key in ("think", "max_cost"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or value <= 0):  # fmt: skip
            raise _fail(path, f"[run] {key}", f"is {value!r}; give a positive number")
    if "sandbox" in options and options["sandbox"] not in SANDBOXES:
        raise _fail(path, "[run] sandbox", f"is {options['sandbox']!r}; choose one of "
                    f"{', '.join(sorted(SANDBOXES))}")  # fmt: skip
    return options


def _tasks(path: Path, raw: dict[str, Any]) -> dict[str, Path]:
    from swarm.tasks.model import load_task

    if "task" in raw and "tasks" in raw:
        raise InvalidInput(f"{path}: give either task or tasks, not both")
    values = _axis(path, raw, "tasks", [raw["task"]] if "task" in raw else None)
    tasks: dict[str, Path] = {}
    for value in values:
        if not isinstance(value, str):
            raise _fail(path, "'tasks'", f"holds {value!r}; give task folders as strings")
        folder = (path.parent / value).resolve()
        if not (folder / "task.toml").is_file():
            raise NotFound(f"{path}: task {value!r}: no task.toml in {folder}")
        name = load_task(folder).name
        if name in tasks:
            raise _fail(path, "'tasks'", f"names two tasks called {name!r}")
        tasks[name] = folder
    return tasks


def load_plan(path: Path) -> Plan:
    """Read and check PLAN.toml; raises InvalidInput / NotFound saying what to fix."""
    if not path.is_file():
        raise NotFound(f"no plan at {path}; give a PLAN.toml (see docs/experiments.md)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}") from None
    path = path.resolve()
    _unknown(path, "", raw, TOP_KEYS)
    workers = _ints(path, "workers", _axis(path, raw, "workers"), 1)
    without = [_switches(path, v) for v in _axis(path, raw, "without", [""])]
    if len(set(without)) != len(without):
        raise _fail(path, "'without'", "names the same ablation twice")
    if "seeds" in raw and "repeats" in raw:
        raise InvalidInput(f"{path}: give either seeds or repeats, not both")
    if "repeats" in raw:
        repeats = _ints(path, "repeats", [raw["repeats"]], 1)[0]
        seeds = list(range(1, repeats + 1))
    else:
        seeds = _ints(path, "seeds", _axis(path, raw, "seeds", [1]), 0)
    setups = _setups(path, raw)
    base = raw.get("baseline", {})
    if isinstance(base, str):
        base = {"without": base}
    if not isinstance(base, dict):
        raise _fail(path, "'baseline'", 'must be an ablation ("", "claims") or a table')
    _unknown(path, "baseline", base, ("without", "setup"))
    baseline_without = _switches(path, base["without"]) if "without" in base else without[0]
    if baseline_without not in without:
        raise _fail(path, "'baseline'", f"is {ablation_label(baseline_without)!r}, which "
                    "'without' does not list; give one of its values")  # fmt: skip
    baseline_setup = str(base.get("setup", setups[0].name))
    if baseline_setup not in {s.name for s in setups}:
        raise _fail(path, "'baseline' setup", f"{baseline_setup!r} is not a setup's name")
    prepare_options = raw.get("prepare_options", {})
    if not isinstance(prepare_options, dict):
        raise _fail(path, "[prepare_options]", "must be a table")
    if "seed" in prepare_options:
        raise _fail(path, "[prepare_options] seed", "is set per run from seeds/repeats; drop it")
    max_cost = raw.get("max_cost")
    if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, int | float)
                                 or max_cost <= 0):  # fmt: skip
        raise _fail(path, "'max_cost'", f"is {max_cost!r}; give a positive number of dollars")
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name.strip() or "/" in name:
        raise _fail(path, "'name'", f"is {name!r}; give a short name without '/'")
    return Plan(
        name=name,
        path=path,
        tasks=_tasks(path, raw),
        workers=workers,
        without=without,
        seeds=seeds,
        setups=setups,
        baseline_without=baseline_without,
        baseline_setup=baseline_setup,
        run=_run_options(path, raw.get("run", {})),
        prepare_options=dict(prepare_options),
        max_cost=float(max_cost) if max_cost is not None else None,
    )


def plan_from_json(data: dict[str, Any], path: Path) -> Plan:
    """The plan an experiment directory recorded (its state file), for the report."""
    return Plan(
        name=data["name"],
        path=path,
        tasks={k: Path(v) for k, v in data["tasks"].items()},
        workers=[int(w) for w in data["workers"]],
        without=[tuple(w) for w in data["without"]],
        seeds=[int(s) for s in data["seeds"]],
        setups=[Setup(**s) for s in data["setups"]],
        baseline_without=tuple(data["baseline"]["without"]),
        baseline_setup=data["baseline"]["setup"],
        run=data.get("run", {}),
        prepare_options=data.get("prepare_options", {}),
        max_cost=data.get("max_cost"),
    )
