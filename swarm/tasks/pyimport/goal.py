"""`goal.md` of an imported task: what the project is, its README, and the API to implement."""

from __future__ import annotations

import textwrap

from swarm.tasks.pyimport.layout import Layout
from swarm.tasks.pyimport.stub import Stub
from swarm.tasks.pyimport.units import module_name

README_LIMIT = 20_000  # characters of the README quoted in the goal; the start has all of it


def api_section(stubs: list[Stub], layout: Layout) -> str:
    """The public stubbed functions by module: signature and docstring of each."""
    out: list[str] = []
    module = None
    for stub in stubs:
        if not stub.public:
            continue
        name = module_name(stub.path, layout.source_root)
        if name != module:
            out.append(f"\n### `{name}` ({stub.path})\n")
            module = name
        doc = stub.docstring.strip() if stub.docstring else ""
        lines = [stub.signature.strip("\n")]
        indent = stub.stub[: len(stub.stub) - len(stub.stub.lstrip())]
        if doc:
            quoted = '"""' + doc + '"""'
            lines.append("\n".join(indent + part if part else part for part in quoted.split("\n")))
        block = "\n".join(lines)
        out.append(f"`{stub.qualname.split(' ')[0]}`:\n\n```python\n{_dedent(block)}\n```\n")
    return "\n".join(out)


def _dedent(text: str) -> str:
    return textwrap.dedent(text)


def write_goal(
    *,
    name: str,
    version: str | None,
    summary: str | None,
    layout: Layout,
    readme: str | None,
    stubs: list[Stub],
    kept: int,
) -> str:
    """The goal's text."""
    title = f"{name} {version}" if version else name
    where = f"`{layout.source_root}/`" if layout.source_root else "the repository root"
    public = sum(1 for s in stubs if s.public)
    docs = f", `{layout.docs}/`" if layout.docs else ""
    kept_text = (
        f"{kept} function{'s' if kept != 1 else ''} that importing the package runs "
        f"{'were' if kept != 1 else 'was'} kept as written. "
        if kept
        else ""
    )
    intro = (
        f"The repository holds the Python package `{layout.import_name}` ({layout.package}), "
        f"with the body of {len(stubs)} functions and methods replaced by `raise "
        f"NotImplementedError(...)` ({public} of them public, listed below with their "
        "signatures and docstrings). Implement them so that the package behaves as its "
        f"documentation describes (the README{docs} and the docstrings). {kept_text}"
        f"A hidden test suite checks the package; it imports `{layout.import_name}` from "
        f"{where}, with this repository as the working folder."
    )
    parts = [
        f"# Goal: finish `{title}`\n",
        (f"{summary.strip()}\n" if summary else ""),
        textwrap.fill(intro, 92, break_on_hyphens=False, break_long_words=False) + "\n",
    ]
    if readme:
        text = readme if len(readme) <= README_LIMIT else readme[:README_LIMIT] + "\n\n[…]\n"
        source = layout.readme or "README"
        parts.append(f"## The project's {source}\n\n{text.strip()}\n")
    parts.append("## Public API to implement\n" + api_section(stubs, layout))
    return "\n".join(p for p in parts if p).rstrip() + "\n"
