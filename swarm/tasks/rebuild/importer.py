"""`import_debian`: a program-rebuild task from a Debian package, and the `debian` preparer.

The task's parts come from Debian: the program (the oracle) from the binary package and the
library packages it depends on, unpacked with dpkg-deb (not installed); the hidden tests from
the source package's own test suite (apt-get source --download-only, dpkg-source -x), turned
into command-line tests by the program's recipe and kept only where the original program
passes them; the documentation from its manual. The start holds only a README and the
manual. Downloads are cached, so preparing again works offline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from swarm.errors import Conflict, InvalidInput, Unavailable
from swarm.evaluation import cli_tests
from swarm.tasks.fetch import extract_deb
from swarm.tasks.prepare import write_files
from swarm.tasks.rebuild import debian
from swarm.tasks.rebuild.oracle import OracleProgram, elf_interpreter, write_manifest
from swarm.tasks.rebuild.recipes import Recipe, recipe_for
from swarm.tasks.rebuild.texts import GOAL, ORACLE_NOTE, README, TASK_TOML, WRAPPER
from swarm.tasks.units import dump_units

Say = Callable[[str], None]
SKIPPED_DIRS = ("usr/share/doc", "usr/share/man", "usr/share/lintian")


def _quiet(_line: str) -> None:
    return None


def rewrap(text: str, width: int = 92) -> str:
    """Paragraphs filled to `width`; indented (code) lines and headings kept as they are."""
    out = []
    for block in text.split("\n\n"):
        if block.startswith(("    ", "#")) or not block.strip():
            out.append(block)
        else:
            out.append(textwrap.fill(" ".join(block.split()), width, break_on_hyphens=False))
    return "\n\n".join(out).rstrip("\n") + "\n"


def import_debian(source: str, dest: Path, **options: Any) -> Path:
    """Make `dest` a prepared task rebuilding the program of Debian package `source`
    (`debian:jq` or `jq`). Options: `version` (pin the package version), `name`, `budget`,
    `force` (replace a task already there), `say` (progress lines)."""
    say: Say = options.pop("say", _quiet)
    force = bool(options.pop("force", False))
    package = debian.check_package_name(source.removeprefix("debian:"))
    recipe = recipe_for(package)  # an unknown test format stops here, before any download
    dest = Path(dest)
    if (dest / "task.toml").exists() and not force:
        raise Conflict(f"{dest} already holds a task; use --force to import it again")
    unknown = sorted(set(options) - {"version", "name", "budget"})
    if unknown:
        raise InvalidInput(f"unknown import option {unknown[0]!r} (known: version, name, budget)")
    dest.mkdir(parents=True, exist_ok=True)
    pinned = f'version = "{options["version"]}"\n' if options.get("version") else ""
    if pinned and not debian.VERSION.fullmatch(str(options["version"])):
        raise InvalidInput(f"{options['version']!r} is not a Debian version (e.g. 1.6-2.1)")
    (dest / "task.toml").write_text(
        TASK_TOML.format(
            name=options.get("name") or package,
            program=recipe.program,
            package=package,
            implementation=recipe.implementation,
            budget=options.get("budget") or "6h",
            solution='solution = "solution/units.json"\n' if recipe.has_reference else "",
            pinned=pinned,
        ),
        encoding="utf-8",
    )
    from swarm.tasks.prepare import prepare_task

    prepare_task(dest, force=True, say=say)
    return dest


def _choose_source(
    apt: debian.Apt, package: str, version: str | None, force: bool, say: Say
) -> tuple[debian.Record, Path]:
    """The newest source record whose files download (or the pinned one), unpacked."""
    candidates = debian.source_records(apt, package)
    if version:
        candidates = [r for r in candidates if r.version == version]
        if not candidates:
            raise InvalidInput(f"Debian has no source of {package} at version {version}")
    failures = []
    for record in candidates:
        try:
            say(f"fetching source package {record.package} {record.version} (or the cached copy)")
            return record, debian.fetch_source(apt, record, force=force)
        except Unavailable as exc:
            failures.append(exc.message)
            say(f"source {record.version} did not download: {exc.message}; trying the next")
    raise Unavailable(f"no deb-src reachable for {package}: " + "; ".join(failures[-2:]))


def _unpack_program(
    apt: debian.Apt, package: str, version: str, root: Path, force: bool, say: Say
) -> list[str]:
    """The binary package and the library packages it needs, unpacked under `root`."""
    from debian.deb822 import PkgRelation

    wanted: list[tuple[str, str | None]] = [(package, version)]
    done: list[str] = []
    while wanted:
        name, exact = wanted.pop(0)
        records = debian.binary_records(apt, name)
        record = next((r for r in records if r.version == exact), None) if exact else None
        record = record or records[0]
        say(f"fetching binary package {name} {record.version} (or the cached copy)")
        extract_deb(debian.fetch_deb(apt, name, record.version, force=force), root)
        done.append(f"{name} {record.version}")
        fields = (record.fields.get(k, "").strip() for k in ("Pre-Depends", "Depends"))
        relations = ", ".join(f for f in fields if f)
        for alternatives in PkgRelation.parse_relations(relations) if relations else []:
            first = alternatives[0]
            dep = str(first["name"])
            seen = {w[0] for w in wanted} | {d.split()[0] for d in done}
            if not dep.startswith("lib") or dep.startswith("libc6") or dep in seen:
                continue
            pin = first.get("version")
            wanted.append((dep, pin[1] if pin and pin[0] == "=" else None))
    return done


def _oracle(root: Path, recipe: Recipe, label: str) -> OracleProgram:
    """The wrapper script and manifest of the unpacked program under `root`."""
    unpacked = root / "root"
    executable = unpacked / "usr" / "bin" / recipe.program
    if not executable.is_file():
        found = sorted(p.name for p in (unpacked / "usr" / "bin").glob("*"))
        raise InvalidInput(
            f"the package has no /usr/bin/{recipe.program} (it has: {', '.join(found) or 'none'})"
        )
    libraries = sorted(
        {str(p.parent.relative_to(root)) for p in unpacked.rglob("*.so*") if p.is_file()}
    )
    interpreter = elf_interpreter(executable)
    installed = sorted(
        "/" + str(p.relative_to(unpacked))
        for p in unpacked.rglob("*")
        if (p.is_file() or p.is_symlink())
        and not str(p.relative_to(unpacked)).startswith(SKIPPED_DIRS)
    )
    program = OracleProgram(
        root=root,
        program=recipe.program,
        command=recipe.program,
        interpreter=interpreter,
        executable=str(executable.relative_to(root)),
        library_path=tuple(libraries),
        installed=tuple(installed),
    )
    write_manifest(program)
    if interpreter:
        libs = ":".join(f"$here/{p}" for p in libraries)
        start = f'"{interpreter}" --library-path "{libs}" --argv0 {recipe.program}'
    else:
        start = ""
    wrapper = root / recipe.program
    wrapper.write_text(
        WRAPPER.format(label=label, start=start, executable=program.executable), encoding="utf-8"
    )
    wrapper.chmod(0o755)
    return program


def _check_with_oracle(
    tests: list[dict[str, Any]], wrapper: Path, say: Say
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, dropped): the tests the original program passes, and the others with why."""
    from swarm.evaluation.evaluate import clean_env

    with tempfile.TemporaryDirectory(prefix="swarm-import-") as scratch:
        file = Path(scratch) / "tests.jsonl"
        file.write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, cli_tests.__file__, str(file), "--", str(wrapper)],
            cwd=scratch, env=clean_env(Path(scratch)), capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
    why: dict[str, str] = {}
    passed: set[str] = set()
    for line in done.stdout.splitlines():
        outcome, _, rest = line.partition(" ")
        test_id, _, reason = rest.partition(" - ")
        test_id = test_id.removeprefix("tests.jsonl::")
        if outcome == "PASSED":
            passed.add(test_id)
        elif outcome == "FAILED":
            why[test_id] = reason
    if not passed and not why:
        raise Unavailable(f"the original program could not be scored: {done.stderr[-300:]}")
    kept = [t for t in tests if t["id"] in passed]
    dropped = [{**t, "why": why.get(t["id"], "not run")} for t in tests if t["id"] not in passed]
    say(f"tests: {len(kept)} kept; {len(dropped)} dropped because the original program fails them")
    return kept, dropped


def prepare_debian(root: Path, options: Mapping[str, Any], *, force: bool, say: Say) -> list[str]:
    """Write oracle/, hidden/, start/, goal.md, solution/ (when the recipe has a reference) and
    import.json into `root`."""
    package = debian.check_package_name(str(options.get("package", "")))
    recipe = recipe_for(package)
    say("apt: Debian's package lists, with sources, in the cache (or the cached copy)")
    apt = debian.private_apt(force=force)
    binaries = debian.binary_records(apt, package)
    source, tree = _choose_source(apt, package, options.get("version"), force, say)
    wanted = source.version if any(b.version == source.version for b in binaries) else None
    oracle_dir = root / "oracle"
    write_files(oracle_dir, {})
    installed = _unpack_program(apt, package, wanted or binaries[0].version, oracle_dir / "root",
                                force, say)  # fmt: skip
    label = ", ".join(installed)
    program = _oracle(oracle_dir, recipe, label)
    upstream = source.version.split(":")[-1].rsplit("-", 1)[0].split("+")[0]
    tests = recipe.tests(tree)
    kept, dropped = _check_with_oracle(tests, oracle_dir / recipe.program, say)
    runner = Path(cli_tests.__file__).read_text(encoding="utf-8")
    lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in kept)
    write_files(root / "hidden", {"tests.jsonl": lines, "cli_tests.py": runner})
    manual = recipe.manual(tree, upstream)
    readme = README.format(
        program=recipe.program, upstream=upstream, language=recipe.language,
        implementation=recipe.implementation, title=manual.title,
    )  # fmt: skip
    write_files(root / "start", {"README.md": readme, "docs/manual.md": manual.markdown})
    description = binaries[0].fields.get("Description", "").splitlines()[0].strip()
    note = ORACLE_NOTE.format(label=installed[0], example=recipe.example)
    goal = GOAL.format(
        program=recipe.program, upstream=upstream, language=recipe.language,
        description=description, implementation=recipe.implementation,
        source=f"{source.package} {source.version}", tests=recipe.describe_tests(len(kept)),
        sections=", ".join(manual.sections), oracle=note,
    )  # fmt: skip
    (root / "goal.md").write_text(rewrap(goal), encoding="utf-8")
    written = ["oracle", "hidden", "start", "goal.md", "import.json"]
    units = recipe.reference(program.root / "root", say)
    if units:
        write_files(root / "solution", {"units.json": dump_units(units)})
        written.append("solution")
    provenance = {
        "package": package,
        "source": f"{source.package} {source.version}",
        "binaries": installed,
        "tests": {"converted": len(tests), "kept": len(kept), "dropped": dropped},
    }
    (root / "import.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    return written


# `swarm task prepare` finds preparers as prepare_<name>.
__all__ = ["import_debian", "prepare_debian"]
