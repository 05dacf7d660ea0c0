"""Where a project keeps its package, its tests and its docs (given, or found)."""

from __future__ import annotations

import email.parser
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import InvalidInput, NotFound

NOT_PACKAGES = {"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks",
                "bench", "scripts", "tools", "build", "dist", "site"}  # fmt: skip
NOT_MODULES = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "manage.py",
               "dodo.py", "bootstrap.py", "ez_setup.py"}  # fmt: skip
TEST_DIRS = ("tests", "test", "testing")
README_NAMES = ("README.md", "README.rst", "README.txt", "README")


@dataclass(frozen=True)
class Layout:
    """Paths relative to the project's root."""

    package: str  # "src/cachetools" (a folder with __init__.py) or "xmltodict.py" (a module)
    tests: tuple[str, ...]  # test folders or files
    docs: str | None
    readme: str | None

    @property
    def import_name(self) -> str:
        return Path(self.package).name.removesuffix(".py")

    @property
    def source_root(self) -> str:
        """The folder that must be on sys.path: "" (the root) or e.g. "src"."""
        parent = str(Path(self.package).parent)
        return "" if parent == "." else parent

    def package_files(self, root: Path) -> list[str]:
        """The package's Python files (tests inside it excluded), relative to the root."""
        base = root / self.package
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        inside = [t for t in self.tests if Path(t).is_relative_to(self.package)]
        return [
            str(f.relative_to(root))
            for f in files
            if not any(f.relative_to(root).is_relative_to(t) for t in inside)
            and "__pycache__" not in f.parts
        ]


def _relative(root: Path, given: str, what: str) -> str:
    path = (root / given).resolve()
    if not path.is_relative_to(root.resolve()) or not path.exists():
        raise NotFound(f"--{what} {given!r}: no such path in the project ({root})")
    return str(path.relative_to(root.resolve()))


def _top_level(root: Path) -> list[str]:
    """Names an sdist's *.egg-info/top_level.txt declares."""
    names: list[str] = []
    for file in [
        *root.glob("*.egg-info/top_level.txt"),
        *root.glob("src/*.egg-info/top_level.txt"),
    ]:
        names += [n.strip() for n in file.read_text(encoding="utf-8").splitlines() if n.strip()]
    return names


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def other_packages(root: Path, package: str) -> list[str]:
    """The project's other top-level packages (folders with __init__.py): they go to the start
    as they are, never stubbed (e.g. toolz's `tlz`, which re-exports `toolz`)."""
    found = []
    for base in (root, root / "src"):
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            relative = str(child.relative_to(root))
            if (
                child.is_dir()
                and (child / "__init__.py").is_file()
                and relative != package
                and child.name not in NOT_PACKAGES
                and not child.name.startswith((".", "_"))
            ):
                found.append(relative)
    return found


def find_package(root: Path, name: str) -> str:
    candidates: list[str] = []
    for base in (root, root / "src"):
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            if child.name.startswith((".", "_")) or child.name in NOT_PACKAGES:
                continue
            package = child.is_dir() and (child / "__init__.py").is_file()
            module = (
                child.suffix == ".py"
                and child.name not in NOT_MODULES
                and not child.name.startswith("test")
                and not child.stem.endswith("_test")
            )
            if package or module:
                candidates.append(str(child.relative_to(root)))
    if not candidates:
        raise NotFound(
            f"no Python package found in {root} (a folder with __init__.py, or a module, at the "
            "top or under src/); give it with --package PATH"
        )
    if len(candidates) == 1:
        return candidates[0]
    wanted = [_norm(n) for n in [name, name.removeprefix("python-"), *_top_level(root)]]
    for want in wanted:
        for candidate in candidates:
            if _norm(Path(candidate).name.removesuffix(".py")) == want:
                return candidate
    raise InvalidInput(
        f"several packages in {root}: {', '.join(candidates)}; choose one with --package PATH"
    )


def find_tests(root: Path, package: str) -> tuple[str, ...]:
    for name in TEST_DIRS:
        if (root / name).is_dir() and any((root / name).rglob("test*.py")):
            return (name,)
    pkg = root / package
    if pkg.is_dir():
        for name in TEST_DIRS:
            if (pkg / name).is_dir() and any((pkg / name).rglob("test*.py")):
                return (f"{package}/{name}",)
    files = sorted(
        p for p in root.glob("*.py") if p.name.startswith("test") or p.stem.endswith("_test")
    )
    if not files and pkg.is_dir():
        files = sorted(p for p in pkg.glob("test_*.py"))
    if files:
        return tuple(str(f.relative_to(root)) for f in files)
    raise NotFound(
        f"no tests found in {root} (looked for tests/, test/, testing/, test_*.py at the top and "
        f"in {package}); give them with --tests PATH (the sdist may not ship its tests: try a "
        "git source)"
    )


def find_layout(
    root: Path,
    name: str,
    *,
    package: str | None = None,
    tests: tuple[str, ...] = (),
    docs: str | None = None,
) -> Layout:
    """The project's layout: what is given, the rest found."""
    pkg = _relative(root, package, "package") if package else find_package(root, name)
    if not ((root / pkg).is_file() and pkg.endswith(".py")) and not (
        (root / pkg / "__init__.py").is_file()
    ):
        raise InvalidInput(f"--package {pkg!r} is neither a module (.py) nor a package folder")
    found_tests = tuple(_relative(root, t, "tests") for t in tests) or find_tests(root, pkg)
    doc: str | None = _relative(root, docs, "docs") if docs else None
    if doc is None:
        doc = next((d for d in ("docs", "doc") if (root / d).is_dir()), None)
    readme = next((r for r in README_NAMES if (root / r).is_file()), None)
    return Layout(pkg, found_tests, doc, readme)


def dependencies(root: Path) -> list[str]:
    """The project's runtime requirements (no extras): PKG-INFO's Requires-Dist, else
    pyproject.toml's [project].dependencies."""
    info = root / "PKG-INFO"
    found: list[str] = []
    if info.is_file():
        message = email.parser.Parser().parsestr(info.read_text(encoding="utf-8", errors="replace"))
        found = [r for r in message.get_all("Requires-Dist") or [] if "extra" not in r]
    elif (root / "pyproject.toml").is_file():
        try:
            data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError:
            data = {}
        found = [str(d) for d in data.get("project", {}).get("dependencies", [])]
    return [d.strip() for d in found if d.strip()]


def summary(root: Path) -> str | None:
    """The project's one-line description (PKG-INFO's Summary or [project].description)."""
    info = root / "PKG-INFO"
    if info.is_file():
        message = email.parser.Parser().parsestr(info.read_text(encoding="utf-8", errors="replace"))
        text = message.get("Summary")
        if text and text.strip() and text.strip() != "UNKNOWN":
            return text.strip()
    if (root / "pyproject.toml").is_file():
        try:
            data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError:
            return None
        value = data.get("project", {}).get("description")
        return str(value) if value else None
    return None


def pytest_options(root: Path) -> dict[str, str]:
    """The project's pytest settings worth keeping for its tests (markers, warnings filters,
    …; never addopts, which name plugins and coverage the evaluator does not have)."""
    keep = ("markers", "filterwarnings", "xfail_strict", "python_files", "python_classes",
            "python_functions", "doctest_optionflags", "usefixtures", "asyncio_mode")  # fmt: skip
    options: dict[str, object] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError:
            data = {}
        options = data.get("tool", {}).get("pytest", {}).get("ini_options", {})
    if not options:
        import configparser

        for file, section in (("pytest.ini", "pytest"), ("tox.ini", "pytest"),
                              ("setup.cfg", "tool:pytest")):  # fmt: skip
            if not (root / file).is_file():
                continue
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read(root / file, encoding="utf-8")
            except configparser.Error:
                continue
            if parser.has_section(section):
                options = dict(parser.items(section))
                break
    out: dict[str, str] = {}
    for key in keep:
        value = options.get(key)
        if value is None:
            continue
        if isinstance(value, list):
            out[key] = "\n" + "\n".join(f"    {v}" for v in value)
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out[key] = text if "\n" not in text else text.rstrip()
    return out
