"""`swarm task import` of Python projects: the stubber, unit grouping, the import probe (real
subprocesses), the check (the real evaluator), the registry and the errors."""

from __future__ import annotations

import ast
import itertools
import json
import textwrap
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.errors import Conflict, InvalidInput, NotFound
from swarm.tasks.catalog import registered, resolve_task_path
from swarm.tasks.cli import task_group
from swarm.tasks.model import load_task
from swarm.tasks.pyimport.importer import ImportOptions, default_dest, import_python
from swarm.tasks.pyimport.source import parse_source
from swarm.tasks.pyimport.stub import stub_source
from swarm.tasks.pyimport.units import build_units, group_stubs
from swarm.tasks.units import Edit, Unit, apply_unit, check_independent, load_units

SHAPES = textwrap.dedent(
    '''\
    import functools
    from typing import overload


    def top(a, b=1):
        """Add b to a."""
        # a comment that tells how
        return a + b


    @functools.lru_cache(maxsize=None)
    def cached(x):
        return x * 2


    class Box:
        """A box."""

        def __init__(self, value):
            self.value = value

        @property
        def size(self):
            """The size."""
            return self.value

        @size.setter
        def size(self, value):
            self.value = value

        @overload
        def get(self, key: int) -> int: ...
        @overload
        def get(self, key: str) -> str: ...
        def get(self, key):
            return key

        async def fetch(self):
            def inner():
                return 1

            return inner()

        def one(self): return 1

        def documented_only(self):
            """Nothing to write."""

        def abstract(self):
            raise NotImplementedError

        class Inner:
            def method(self):
                return 2


    if True:
        def conditional():
            return "yes"
    '''
)


def test_the_stubber_stubs_every_shape_and_keeps_docstrings_and_declarations() -> None:
    stubbed, stubs = stub_source(SHAPES, "shapes.py")
    names = [s.qualname for s in stubs]
    assert names == ["top", "cached", "Box.__init__", "Box.size", "Box.size (2)", "Box.get",
                     "Box.fetch", "Box.Inner.method", "conditional"]  # fmt: skip
    tree = ast.parse(stubbed)  # still valid Python
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert ast.get_docstring(functions["top"]) == "Add b to a."
    assert "a comment that tells how" not in stubbed and "return a + b" not in stubbed
    assert '    raise NotImplementedError("top")\n' in stubbed
    assert '        raise NotImplementedError("Box.size (2)")\n' in stubbed
    assert "@functools.lru_cache(maxsize=None)\ndef cached(x):\n    raise" in stubbed
    # @overload declarations, one-liners, docstring-only and abstract bodies are left as they are
    assert stubbed.count("...") == 2 and "def one(self): return 1" in stubbed
    assert '"""Nothing to write."""' in stubbed and "raise NotImplementedError\n" in stubbed
    # a nested function goes with the function that holds it; async stays async
    assert "inner" not in stubbed and "async def fetch(self):" in stubbed
    assert all(s.is_async == (s.qualname == "Box.fetch") for s in stubs)
    assert "def inner():" in next(s for s in stubs if s.qualname == "Box.fetch").original
    assert [s.qualname for s in stubs if not s.public] == []


def test_keep_leaves_named_functions_as_they_are() -> None:
    stubbed, stubs = stub_source(SHAPES, "shapes.py", frozenset({"Box.__init__", "top"}))
    assert "self.value = value\n\n    @property" in stubbed and "return a + b" in stubbed
    assert "top" not in [s.qualname for s in stubs]


def test_units_put_every_body_back_and_merge_only_when_too_close(tmp_path: Path) -> None:
    stubbed, stubs = stub_source(SHAPES, "shapes.py")
    (tmp_path / "shapes.py").write_text(stubbed)
    units = build_units(stubs, {"shapes.py": stubbed}, "")
    check_independent(units, tmp_path)  # raises when two units are too close
    groups = group_stubs(stubs, {"shapes.py": stubbed})
    assert sum(len(g) for g in groups) == len(stubs) and len(groups) == len(units)
    lines = stubbed.splitlines()

    def line_of(stub_text: str) -> int:
        return next(i for i, line in enumerate(lines) if line + "\n" == stub_text)

    for group in groups:  # within a group every stub is close to the one before it
        at = [line_of(s.stub) for s in group]
        assert all(b - a - 2 < 3 for a, b in itertools.pairwise(at))
    for a, b in itertools.pairwise(groups):  # between groups there is room
        assert line_of(b[0].stub) - line_of(a[-1].stub) - 2 >= 3
    assert {u.id for u in units} >= {"shapes.top", "shapes.cached"}
    for unit in units:
        apply_unit(unit, tmp_path)
    assert (tmp_path / "shapes.py").read_text() == SHAPES


def test_units_that_are_merged_fail_the_independence_check_when_split(tmp_path: Path) -> None:
    source = "class A:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n"
    stubbed, stubs = stub_source(source, "m.py")
    (tmp_path / "m.py").write_text(stubbed)
    units = build_units(stubs, {"m.py": stubbed}, "")
    assert len(units) == 1 and units[0].id == "m.A.a+1"
    assert units[0].scope == ("m.py::A.a", "m.py::A.b")
    split = [Unit(s.qualname, s.qualname, (), (Edit(s.path, s.stub, s.original),)) for s in stubs]
    with pytest.raises(InvalidInput, match="less than 3 lines apart"):
        check_independent(split, tmp_path)


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


MINI = {
    "pyproject.toml": """\
        [project]
        name = "mini-lib"
        version = "0.3"
        description = "A tiny library of words and boxes."
        """,
    "README.md": "# mini\n\nWords and boxes: `shout(text)` shouts, `Counter` counts.\n",
    "src/mini/__init__.py": '''\
        """Words and boxes."""

        from mini.words import shout, registry

        __all__ = ["shout", "Counter"]


        def _register(name):
            """A decorator factory that runs at import time."""
            def wrap(cls):
                registry[name] = cls
                return cls
            return wrap


        @_register("counter")
        class Counter:
            """Counts what it is given."""

            def __init__(self):
                self.counts = {}

            def add(self, item):
                """Count one more `item`; return its count."""
                self.counts[item] = self.counts.get(item, 0) + 1
                return self.counts[item]
        ''',
    "src/mini/words.py": '''\
        registry = {}


        def _vowels():
            return set("aeiou")


        VOWELS = _vowels()  # runs at import time


        def shout(text):
            """Upper case with a bang: shout("hi") == "HI!"."""
            return text.upper() + "!"


        def count_vowels(text):
            """How many vowels `text` has."""
            return sum(1 for c in text.lower() if c in VOWELS)
        ''',
    "tests/conftest.py": """\
        import pytest


        @pytest.fixture
        def word():
            return "hello"
        """,
    "tests/data/words.txt": "apple\nsky\n",
    "tests/test_mini.py": """\
        from pathlib import Path

        import pytest

        import mini
        from mini.words import count_vowels, shout

        WORDS = (Path(__file__).parent / "data" / "words.txt").read_text().split()


        def test_shout(word):
            assert shout(word) == "HELLO!"


        @pytest.mark.parametrize("text", WORDS)
        def test_count(text):
            assert count_vowels(text) == sum(c in "aeiou" for c in text)


        def test_counter():
            counter = mini.Counter()
            assert counter.add("a") == 1 and counter.add("a") == 2
            assert mini.words.registry["counter"] is mini.Counter
        """,
}


@pytest.fixture(scope="module")
def mini_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mini")
    project = write_project(root / "mini-lib", MINI)
    return import_python(str(project), root / "task")


def test_a_folder_imports_with_what_importing_needs_kept(mini_task: Path) -> None:
    task = load_task(mini_task)
    provenance = json.loads((mini_task / "import.json").read_text())
    # Found by importing the stubbed package: the decorator factory and the helper called at
    # module level; nothing else.
    assert provenance["kept_for_import"] == ["mini._register", "mini.words._vowels"]
    words = (task.start_dir / "src/mini/words.py").read_text()
    assert 'raise NotImplementedError("shout")' in words and "return set" in words
    assert not (task.start_dir / "tests").exists() and (task.start_dir / "README.md").exists()
    assert (task.hidden_dir / "tests/data/words.txt").is_file()
    assert (task.hidden_dir / "tests/conftest.py").is_file()
    assert not (task.hidden_dir / "src/mini").exists()
    assert 'PYTHONPATH="$PWD/src:$PYTHONPATH"' in task.eval_command
    goal = task.goal_text()
    assert "# Goal: finish `mini-lib`" in goal and "Words and boxes" in goal
    assert "def count_vowels(text):" in goal and "How many vowels" in goal
    assert "def _vowels" not in goal  # private: not in the API list
    # Counter's two methods are too close for two units; the docstrings keep the others apart.
    assert {u.id for u in load_units(task)} == {
        "mini.Counter.__init__+1", "mini.words.shout", "mini.words.count_vowels"
    }  # fmt: skip


def test_check_scores_start_and_reference_and_pins_the_tests(mini_task: Path) -> None:
    result = CliRunner().invoke(task_group, ["check", str(mini_task)])
    assert result.exit_code == 0, result.output
    assert "start:     0/4 passed" in result.output
    assert "reference: 4/4 passed (100.0%)" in result.output
    assert "verdict: sound" in result.output
    data = tomllib.loads((mini_task / "task.toml").read_text())
    assert data["check"]["tests"] == 4 and data["check"]["reference_passed"] == 4
    assert data["name"] == "mini-lib"  # the rest of task.toml as it was
    task = load_task(mini_task)
    assert task.check is not None and len(task.check.pinned_ids()) == 4
    assert "tests/test_mini.py::test_count[apple]" in task.check.pinned_ids()


def test_a_check_whose_reference_fails_exits_1_and_pins_nothing(
    mini_task: Path, tmp_path: Path
) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(mini_task, broken)
    units = json.loads((broken / "solution/units.json").read_text())
    units[0]["edits"][0]["new"] = "        pass\n"  # Counter.__init__ does nothing now
    (broken / "solution/units.json").write_text(json.dumps(units))
    before = (broken / "task.toml").read_text()
    result = CliRunner().invoke(task_group, ["check", str(broken)])
    assert result.exit_code == 1
    assert "the reference passes 3 of 4 tests, not all" in result.output
    assert "tests/test_mini.py::test_counter" in result.output and "NOT sound" in result.output
    assert (broken / "task.toml").read_text() == before


def test_an_import_that_crashes_outside_a_stub_names_the_module_and_line(tmp_path: Path) -> None:
    project = write_project(
        tmp_path / "crash",
        {
            "crash.py": """\
                def _probe():
                    return 1


                try:
                    FAST = _probe()
                except Exception:
                    FAST = None
                assert FAST is not None, "no fast path"
                """,
            "test_crash.py": "import crash\n\n\ndef test_fast():\n    assert crash.FAST\n",
        },
    )
    with pytest.raises(InvalidInput) as caught:
        import_python(str(project), tmp_path / "task")
    assert (
        "with its functions stubbed, crash does not import: crash.py:9: AssertionError: no fast "
        "path" in caught.value.message
    )


def test_clear_errors_for_bad_sources_and_layouts(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"unknown source 'cpan:Foo': give pypi:NAME==VERSION"):
        parse_source("cpan:Foo")
    with pytest.raises(InvalidInput, match="is not a PyPI source"):
        parse_source("pypi:bad name==1")
    only_code = write_project(tmp_path / "nocode", {"lib.py": "def f():\n    return 1\n"})
    with pytest.raises(NotFound, match=r"no tests found in .*give them with --tests PATH"):
        import_python(str(only_code), tmp_path / "t1")
    only_tests = write_project(tmp_path / "notests", {"tests/test_x.py": "def test(): pass\n"})
    with pytest.raises(NotFound, match=r"no Python package found .*--package PATH"):
        import_python(str(only_tests), tmp_path / "t2")
    with pytest.raises(NotFound, match=r"--package 'nope': no such path"):
        import_python(str(only_code), tmp_path / "t3", ImportOptions(package="nope"))
    with pytest.raises(InvalidInput, match=r"--rev v1: .* is not a git repository"):
        import_python(str(only_code), tmp_path / "t4", ImportOptions(rev="v1"))
    for dest in ("t1", "t2", "t3", "t4"):
        assert not (tmp_path / dest).exists()  # nothing written
    result = CliRunner().invoke(task_group, ["import", "ftp://x/y", str(tmp_path / "t5")])
    assert result.exit_code == 1 and "unknown source 'ftp://x/y'" in result.output
    assert "fetching" not in result.output


def test_importing_over_a_task_needs_force(mini_task: Path) -> None:
    with pytest.raises(Conflict, match="already holds a task; use --force"):
        import_python(str(mini_task), mini_task)


def test_default_destination_is_tasks_name() -> None:
    assert default_dest("pypi:python-slugify==9.2.0") == Path("tasks/python-slugify")
    assert default_dest("git+https://example.org/a/Lib.git@v1") == Path("tasks/lib")
    assert default_dest("debian:jq") == Path("tasks/jq")
    assert default_dest("pypi:x==1", "mine") == Path("tasks/mine")


def test_the_registry_lists_and_resolves_tasks_by_name(
    mini_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_TASKS_PATH", str(mini_task.parent))
    monkeypatch.chdir(tmp_path)
    names = {e.name for e in registered()}
    assert {"mini-lib", "jq", "inflection"} <= names
    assert resolve_task_path("mini-lib") == mini_task
    assert resolve_task_path("task") == mini_task  # the folder's name works too
    assert resolve_task_path(str(mini_task)) == mini_task
    with pytest.raises(NotFound, match=r"no task 'nothing': no such folder.*: .*mini-lib"):
        resolve_task_path("nothing")
    listed = CliRunner().invoke(task_group, ["list"])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if line.startswith("mini-lib"))
    assert "files, " in row and ("not checked" in row or "reference 4/4" in row)
    jq = next(line for line in listed.output.splitlines() if line.startswith("jq "))
    assert "reference 365/365" in jq  # its committed [check], prepared or not
    shown = CliRunner().invoke(task_group, ["show", "mini-lib", "--lines", "1"])
    assert shown.exit_code == 0 and "task:     mini-lib" in shown.output


def git(cwd: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def test_a_git_revision_is_imported_as_it_was_then(tmp_path: Path) -> None:
    from swarm.tasks.pyimport.source import fetch_project

    repo = write_project(tmp_path / "lib", {"lib.py": "VERSION = 1\n"})
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    git(repo, "tag", "v1")
    (repo / "lib.py").write_text("VERSION = 2\n")
    git(repo, "commit", "-qam", "two")
    (repo / "lib.py").write_text("VERSION = 3\n")  # not committed
    local = fetch_project(str(repo), "v1", tmp_path / "a")
    assert (local.root / "lib.py").read_text() == "VERSION = 1\n"
    assert local.origin == f"git+{repo}@v1"
    remote = fetch_project(f"git+file://{repo}@v1", None, tmp_path / "b")
    assert (remote.root / "lib.py").read_text() == "VERSION = 1\n" and remote.name == "lib"
    head = fetch_project(f"git+file://{repo}", None, tmp_path / "c")
    assert (head.root / "lib.py").read_text() == "VERSION = 2\n"
    folder = fetch_project(str(repo), None, tmp_path / "d")  # a folder: as it is, no .git
    assert (folder.root / "lib.py").read_text() == "VERSION = 3\n"
    assert not (folder.root / ".git").exists()
    with pytest.raises(NotFound, match="no revision 'v9'"):
        fetch_project(str(repo), "v9", tmp_path / "e")


def test_relative_imports_of_moved_tests_become_absolute() -> None:
    from swarm.tasks.pyimport.importer import absolute_imports

    text = "from . import core\nfrom ..util import helper  # x\nfrom .data import ROWS\nimport os\n"
    assert absolute_imports(text, "pkg.tests") == (
        "from pkg.tests import core\nfrom pkg.util import helper  # x\n"
        "from pkg.tests.data import ROWS\nimport os\n"
    )


def test_tests_inside_the_package_move_out_and_other_packages_stay(tmp_path: Path) -> None:
    project = write_project(
        tmp_path / "twin",
        {
            "twin/__init__.py": "def double(x):\n    return 2 * x\n",
            "twin/tests/__init__.py": "",
            "twin/tests/test_twin.py": (
                "from .. import double\nimport twin_alias\n\n\n"
                "def test_double():\n    assert double(2) == 4 == twin_alias.double(2)\n"
            ),
            "twin_alias/__init__.py": "from twin import double\n",
        },
    )
    dest = import_python(str(project), tmp_path / "task", ImportOptions(package="twin"))
    task = load_task(dest)
    assert task.eval_command == "python -m pytest -q --tb=line {hidden}/tests"
    moved = (task.hidden_dir / "tests/test_twin.py").read_text()
    assert moved.startswith("from twin import double\n")
    assert not (task.start_dir / "twin/tests").exists()
    assert (task.start_dir / "twin_alias/__init__.py").read_text() == "from twin import double\n"
    assert not (task.hidden_dir / "twin").exists() and not (task.hidden_dir / "twin_alias").exists()


def test_requirements_and_pytest_settings_come_from_the_project(tmp_path: Path) -> None:
    from swarm.tasks.pyimport.layout import dependencies, pytest_options

    root = write_project(
        tmp_path / "p",
        {
            "PKG-INFO": (
                "Metadata-Version: 2.1\nName: p\nRequires-Dist: attrs>=23.1\n"
                'Requires-Dist: pytest-cov; extra == "test"\n'
            ),
            "pyproject.toml": (
                "[tool.pytest.ini_options]\naddopts = '--cov=p'\nxfail_strict = true\n"
                'markers = ["slow: slow tests"]\n'
            ),
        },
    )
    assert dependencies(root) == ["attrs>=23.1"]  # extras (test tools) are not run-time needs
    assert pytest_options(root) == {"xfail_strict": "true", "markers": "\n    slow: slow tests"}
