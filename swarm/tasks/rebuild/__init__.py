"""Program-rebuild tasks (ProgramBench-style): rebuild a program from its documentation.

The workspace starts empty but for the docs; agents may run the original program, never read
it (`sw oracle`: the hub runs it in a sandbox of its own, swarm.tasks.rebuild.oracle_run); the
hidden tests are command lines with standard input, expected output and exit status, scored
one by one (swarm.evaluation.cli_tests). `import_debian` builds such a task from a Debian
package: the program from its binary package, the tests from its source package's own test
suite, the docs from its manual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def import_debian(source: str, dest: Path, **options: Any) -> Path:
    """See swarm.tasks.rebuild.importer.import_debian (imported only when called)."""
    from swarm.tasks.rebuild.importer import import_debian as run

    return run(source, dest, **options)


__all__ = ["import_debian"]
