"""Score an HTML-producing command against spec examples; prints `N passed, M failed`.

Standard library only: the preparer copies this file next to the hidden examples, so the eval
command needs nothing from swarm. Usage:

    python spec_runner.py EXAMPLES.json [--timeout S] [--jobs N] -- COMMAND [ARG ...]

EXAMPLES.json is a list of {"markdown": ..., "html": ..., "example": n, "section": ...}; the
command reads each example's markdown on stdin and writes HTML on stdout.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from typing import Any

_BLOCK_TAG_NAMES = (
    "address article aside blockquote body button canvas caption col colgroup dd details div dl "
    "dt embed fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr iframe "
    "li map object ol output p pre progress script section style table tbody td textarea tfoot "
    "th thead tr ul video"
)
BLOCK_TAGS = frozenset(_BLOCK_TAG_NAMES.split())
_SPACE = re.compile(r"\s+")


class _Normalizer(HTMLParser):
    """Re-serialise HTML so that insignificant differences (whitespace, attribute order) vanish."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.in_pre = 0
        self.after_block = False

    def _block_boundary(self) -> None:
        if self.out and not self.in_pre:
            self.out[-1] = self.out[-1].rstrip()
        self.after_block = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCK_TAGS:
            self._block_boundary()
        if tag == "pre":
            self.in_pre += 1
        parts = "".join(
            f' {k}="{html.escape(v or "", quote=True)}"' if v is not None else f" {k}"
            for k, v in sorted(attrs)
        )
        self.out.append(f"<{tag}{parts}>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag == "pre":
            self.in_pre -= 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self.in_pre:
            self.in_pre -= 1
        if tag in BLOCK_TAGS:
            self._block_boundary()
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if not self.in_pre:
            data = _SPACE.sub(" ", data)
            if self.after_block:
                data = data.lstrip()
        if data:
            self.after_block = False
        self.out.append(html.escape(data, quote=False))

    def handle_comment(self, data: str) -> None:
        self.out.append(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.out.append(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self.out.append(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        self.out.append(f"<![{data}]>")


def normalize_html(text: str) -> str:
    """A canonical form of `text` for comparing two renderings of the same document."""
    parser = _Normalizer()
    parser.feed(text)
    parser.close()
    return "".join(parser.out).strip()


def run_example(command: list[str], example: dict[str, Any], timeout: float) -> bool:
    """True when `command` renders the example's markdown to the expected HTML."""
    try:
        result = subprocess.run(
            command, input=example["markdown"].encode(), capture_output=True, timeout=timeout
        )
    except (subprocess.TimeoutExpired, OSError):
        return False
    if result.returncode != 0:
        return False
    got = result.stdout.decode("utf-8", errors="replace")
    expected: str = example["html"]
    return got == expected or normalize_html(got) == normalize_html(expected)


def main(argv: list[str] | None = None) -> int:
    """Run every example; print each one's outcome, the failures by section, then
    `N passed, M failed`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("examples")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per example")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to test after `--`")
    with open(args.examples, encoding="utf-8") as handle:
        examples: list[dict[str, Any]] = json.load(handle)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda ex: run_example(command, ex, args.timeout), examples))
    # One line per example, as pytest's `-rA` summary has them: the evaluator keeps each
    # example's outcome, and tells its canaries (examples that must fail) apart by id.
    name = os.path.basename(args.examples)
    for index, (example, ok) in enumerate(zip(examples, results, strict=True)):
        print(f"{'PASSED' if ok else 'FAILED'} {name}::example-{example.get('example', index + 1)}")
    failed_by_section: dict[str, int] = {}
    for example, ok in zip(examples, results, strict=True):
        if not ok:
            section = str(example.get("section", "?"))
            failed_by_section[section] = failed_by_section.get(section, 0) + 1
    for section, count in sorted(failed_by_section.items()):
        print(f"FAILED {count} in section {section}")
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
