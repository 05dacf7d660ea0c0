"""The demo task's library, `textkit`: twelve small functions with specs, bodies and test cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Function:
    """One textkit function: its spec, its reference body and the hidden test cases."""

    name: str
    signature: str
    spec: str
    body: str
    cases: tuple[tuple[tuple[Any, ...], Any], ...]
    imports: str = ""


FUNCTIONS = (
    Function(
        "slugify",
        "(text: str) -> str",
        "Lowercase `text`, turn every run of characters other than a-z and 0-9 into one `-`, "
        "and strip `-` from both ends.",
        '    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")\n',
        (
            (("Hello, World!",), "hello-world"),
            (("  a  b ",), "a-b"),
            (("",), ""),
            (("Déjà vu 2",), "d-j-vu-2"),
        ),
        "import re\n",
    ),
    Function(
        "word_count",
        "(text: str) -> int",
        "The number of whitespace-separated words in `text`.",
        "    return len(text.split())\n",
        ((("one two  three",), 3), (("",), 0), (("\tx\n",), 1), (("a b c d e",), 5)),
    ),
    Function(
        "reverse_words",
        "(text: str) -> str",
        "The whitespace-separated words of `text` in reverse order, joined by single spaces.",
        '    return " ".join(reversed(text.split()))\n',
        ((("a b c",), "c b a"), (("  hello   world ",), "world hello"), (("",), ""), (("x",), "x")),
    ),
    Function(
        "is_palindrome",
        "(text: str) -> bool",
        "True if `text` reads the same backwards, ignoring case and every character that is "
        "not a letter or a digit.",
        "    kept = [c.lower() for c in text if c.isalnum()]\n    return kept == kept[::-1]\n",
        (
            (("A man, a plan, a canal: Panama",), True),
            (("abc",), False),
            (("",), True),
            (("No 'x' in Nixon",), True),
        ),
    ),
    Function(
        "capitalize_words",
        "(text: str) -> str",
        "Every whitespace-separated word with its first character upper-cased and the rest "
        "lower-cased, joined by single spaces.",
        '    return " ".join(w[:1].upper() + w[1:].lower() for w in text.split())\n',
        (
            (("hello WORLD",), "Hello World"),
            (("  a  b",), "A B"),
            (("",), ""),
            (("3rd place",), "3rd Place"),
        ),
    ),
    Function(
        "truncate",
        '(text: str, width: int, suffix: str = "...") -> str',
        "`text` unchanged if it has at most `width` characters, else its first "
        "`width - len(suffix)` characters followed by `suffix`; raise ValueError if `width` is "
        "smaller than `len(suffix)`.",
        "    if width < len(suffix):\n"
        '        raise ValueError("width is shorter than the suffix")\n'
        "    if len(text) <= width:\n        return text\n"
        "    return text[: width - len(suffix)] + suffix\n",
        (
            (("hello world", 8), "hello..."),
            (("short", 10), "short"),
            (("abcdef", 4, "~"), "abc~"),
            (("abc", 3), "abc"),
        ),
    ),
    Function(
        "count_vowels",
        "(text: str) -> int",
        "The number of vowels (a, e, i, o, u, either case) in `text`.",
        '    return sum(1 for c in text.lower() if c in "aeiou")\n',
        ((("Hello World",), 3), (("rhythm",), 0), (("AEIOU aeiou",), 10), (("",), 0)),
    ),
    Function(
        "camel_to_snake",
        "(name: str) -> str",
        "Insert `_` before every upper-case letter that follows a lower-case letter or a digit, "
        "then lower-case everything: `getHTTPResponse` becomes `get_httpresponse`.",
        '    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()\n',
        (
            (("helloWorld",), "hello_world"),
            (("HelloWorld",), "hello_world"),
            (("getHTTPResponse",), "get_httpresponse"),
            (("v2Api",), "v2_api"),
        ),
        "import re\n",
    ),
    Function(
        "snake_to_camel",
        "(name: str) -> str",
        "Split `name` on `_`, drop empty parts, and join them in lowerCamelCase: the first part "
        "lower-cased, the others with their first letter upper-cased and the rest lower-cased.",
        '    parts = [p for p in name.split("_") if p]\n'
        '    if not parts:\n        return ""\n'
        '    return parts[0].lower() + "".join(p[:1].upper() + p[1:].lower() for p in parts[1:])\n',
        (
            (("hello_world",), "helloWorld"),
            (("__a__b__",), "aB"),
            (("",), ""),
            (("HTTP_response_code",), "httpResponseCode"),
        ),
    ),
    Function(
        "rot13",
        "(text: str) -> str",
        "`text` with every ASCII letter rotated by 13 places (case kept); other characters "
        "unchanged.",
        '    return codecs.encode(text, "rot13")\n',
        (
            (("Hello",), "Uryyb"),
            (("uryyb, jbeyq!",), "hello, world!"),
            (("123",), "123"),
            (("",), ""),
        ),
        "import codecs\n",
    ),
    Function(
        "char_frequency",
        "(text: str) -> dict[str, int]",
        "A dict from each character of `text` that is not whitespace to the number of times it "
        "occurs (case-sensitive).",
        "    counts: dict[str, int] = {}\n    for c in text:\n        if not c.isspace():\n"
        "            counts[c] = counts.get(c, 0) + 1\n    return counts\n",
        (
            (("aab",), {"a": 2, "b": 1}),
            (("a a",), {"a": 2}),
            (("",), {}),
            (("Aa",), {"A": 1, "a": 1}),
        ),
    ),
    Function(
        "run_length",
        "(text: str) -> str",
        "Run-length encoding: each run of one repeated character becomes the character followed "
        "by the run's length, with the length left out when it is 1: `aaabcc` becomes `a3bc2`.",
        "    out = []\n"
        '    for m in re.finditer(r"(.)\\1*", text, re.S):\n'
        "        n = len(m.group(0))\n"
        '        out.append(m.group(1) + (str(n) if n > 1 else ""))\n'
        '    return "".join(out)\n',
        ((("aaabcc",), "a3bc2"), (("abc",), "abc"), (("",), ""), (("zzzzzzzzzzzz",), "z12")),
        "import re\n",
    ),
)
