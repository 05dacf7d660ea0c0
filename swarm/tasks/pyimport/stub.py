"""Stub the bodies of a module's functions and methods with `ast`, keeping their docstrings.

A stubbed body is the docstring (when there is one) and `raise NotImplementedError("<name>")`,
where the name is the function's qualified name in its module (`Cache.popitem`), so the raise
line is unique in the file: it is both what a solution unit replaces and what the import check
finds in a traceback. Functions, methods, properties (getter, setter, deleter), decorated and
async functions are stubbed; `@overload` declarations, bodies with nothing to write (`...`,
`pass`, only a docstring, already `raise NotImplementedError`) and one-line definitions are
left as they are. A nested function or class goes with the function that holds it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Stub:
    """One stubbed function: where it is, what replaced its body and what the body was."""

    path: str  # the file, relative to the start repository
    qualname: str  # unique in the file: "Cache.popitem", "Cache.size (2)" for a setter
    stub: str  # the line that replaced the body (indented, with its newline)
    original: str  # the body that the line replaced
    signature: str  # decorators and the `def` line(s), as in the source
    docstring: str | None
    is_async: bool

    @property
    def public(self) -> bool:
        """Whether every part of its name is public (dunder methods count as public)."""
        name = self.qualname.split(" ")[0]
        return all(not p.startswith("_") or p.endswith("__") for p in name.split("."))


def _is_overload(node: FunctionNode) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "overload":
            return True
    return False


def _trivial(statements: list[ast.stmt]) -> bool:
    """Nothing to write: no statement, or only `pass`, `...` or `raise NotImplementedError`."""
    for statement in statements:
        if isinstance(statement, ast.Pass):
            continue
        if (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and statement.value.value is Ellipsis
        ):
            continue
        if isinstance(statement, ast.Raise) and statement.exc is not None:
            exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                continue
        return False
    return True


def _functions(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, FunctionNode]]:
    """(qualified name, node) of the functions defined in `body`: in classes (nested classes
    too) and in `if`/`try`/`with` blocks, never inside other functions."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.If | ast.While | ast.For):
            yield from _functions(node.body, prefix)
            yield from _functions(node.orelse, prefix)
        elif isinstance(node, ast.With):
            yield from _functions(node.body, prefix)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _functions(part, prefix)
            yield from _functions(node.finalbody, prefix)


def _start_line(statement: ast.stmt) -> int:
    """The first line of a statement, its decorators included (1-based)."""
    lines = [statement.lineno]
    decorators = getattr(statement, "decorator_list", [])
    lines += [d.lineno for d in decorators]
    return min(lines)


def stub_source(
    source: str, path: str, keep: frozenset[str] = frozenset()
) -> tuple[str, list[Stub]]:
    """The stubbed text of `source` (the file `path`) and its stubs in file order; the
    functions named in `keep` (qualified names, as in Stub.qualname) are left as they are."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    seen: dict[str, int] = {}
    planned: list[tuple[int, int, Stub]] = []
    for name, node in _functions(tree.body, ""):
        if _is_overload(node):
            continue
        seen[name] = seen.get(name, 0) + 1
        qualname = name if seen[name] == 1 else f"{name} ({seen[name]})"
        if qualname in keep:
            continue
        docstring = ast.get_docstring(node, clean=False)
        code = node.body[1:] if docstring is not None else node.body
        if not code or _trivial(code):
            continue
        if node.body[0].lineno == node.lineno or (
            docstring is not None and _start_line(code[0]) <= (node.body[0].end_lineno or 0)
        ):
            continue  # `def f(): return 1`, or code on the docstring's line: left as they are
        first = (node.body[0].end_lineno or node.body[0].lineno) + 1 if docstring else None
        start = first if first is not None else _start_line(code[0])
        end = code[-1].end_lineno or code[-1].lineno
        text_line = lines[_start_line(code[0]) - 1]
        indent = text_line[: len(text_line) - len(text_line.lstrip())]
        stub = f'{indent}raise NotImplementedError("{qualname}")\n'
        signature = "".join(lines[_start_line(node) - 1 : node.body[0].lineno - 1]).rstrip()
        if not signature:  # the first body line holds the end of the signature
            signature = lines[node.lineno - 1].rstrip()
        original = "".join(lines[start - 1 : end])
        is_async = isinstance(node, ast.AsyncFunctionDef)
        found = Stub(path, qualname, stub, original, signature, docstring, is_async)
        planned.append((start, end, found))
    planned.sort(key=lambda item: item[0])
    for start, end, each in reversed(planned):
        lines[start - 1 : end] = [each.stub]
    return "".join(lines), [each for _, _, each in planned]


def stub_line(text: str, stub: Stub) -> int:
    """The 1-based line of `stub`'s raise statement in the stubbed `text`."""
    return text[: text.index(stub.stub)].count("\n") + 1
