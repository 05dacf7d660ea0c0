"""jq 1.6's command-line options, parsed as its main.c parses them (stacked short options,
`-L dir` and `-Ldir`, `--arg`/`--argjson`/`--slurpfile`/`--rawfile`/`--argfile`, `--args`,
`--jsonargs`, `--`)."""

from __future__ import annotations

from dataclasses import dataclass, field

PRINT_PRETTY, PRINT_ASCII, PRINT_COLOR, PRINT_SORTED = 1, 2, 4, 8
PRINT_TAB, PRINT_ISATTY = 64, 128
PROGNAME = "jq"
VERSION = "1.6"
HELP_HINT = (
    f"Use {PROGNAME} --help for help with command-line options,\n"
    "or see the jq manpage, or online docs  at https://stedolan.github.io/jq\n"
)
SHORT_USAGE = f"For a listing of options, use {PROGNAME} --help.\n"
USAGE = f"""jq - commandline JSON processor [version {VERSION}]

Usage:\t{PROGNAME} [options] <jq filter> [file...]
\t{PROGNAME} [options] --args <jq filter> [strings...]
\t{PROGNAME} [options] --jsonargs <jq filter> [JSON_TEXTS...]

jq is a tool for processing JSON inputs, applying the given filter to
its JSON text inputs and producing the filter's results as JSON on
standard output.

The simplest filter is ., which copies jq's input to its output
unmodified (except for formatting, but note that IEEE754 is used
for number representation internally, with all that that implies).

For more advanced filters see the jq(1) manpage ("man jq")
and/or https://stedolan.github.io/jq

Example:

\t$ echo '{{"foo": 0}}' | jq .
\t{{
\t\t"foo": 0
\t}}

"""
# (letter or "", long name, attribute set to True); order as main.c tests them.
FLAGS = (
    ("s", "slurp", "slurp"),
    ("r", "raw-output", "raw_output"),
    ("C", "color-output", "color"),
    ("M", "monochrome-output", "monochrome"),
    ("a", "ascii-output", "ascii"),
    ("", "unbuffered", "unbuffered"),
    ("S", "sort-keys", "sort_keys"),
    ("R", "raw-input", "raw_input"),
    ("n", "null-input", "null_input"),
    ("f", "from-file", "from_file"),
    ("j", "join-output", "join_output"),
    ("", "seq", "seq"),
    ("", "stream", "stream"),
    ("", "stream-errors", "stream_errors"),
    ("e", "exit-status", "exit_status"),
)
FILE_ARGS = ("argfile", "rawfile", "slurpfile")


def indent_flags(n: int) -> int:
    """jv.h's JV_PRINT_INDENT_FLAGS(n)."""
    if n < 0 or n > 7:
        return PRINT_TAB | PRINT_PRETTY
    return 0 if n == 0 else n << 8 | PRINT_PRETTY


COMPACT = ~(PRINT_TAB | indent_flags(7))


class Exit(Exception):
    """Stop with this exit status after printing `message` on stderr (or `out` on stdout)."""

    def __init__(self, code: int, message: str = "", out: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.out = code, message, out


@dataclass
class Options:
    program: str | None = None
    files: list[str] = field(default_factory=list)
    # ("string", text) or ("json", text), in order: $ARGS.positional.
    positional: list[tuple[str, str]] = field(default_factory=list)
    # name -> (kind, value): kind "arg", "argjson", or one of FILE_ARGS; the first one counts.
    named: dict[str, tuple[str, str]] = field(default_factory=dict)
    library_paths: list[str] | None = None
    # jv_dump's flags as -c, --tab and --indent leave them, in the order given.
    dumpopts: int = indent_flags(2)
    slurp: bool = False
    raw_output: bool = False
    color: bool = False
    monochrome: bool = False
    ascii: bool = False
    unbuffered: bool = False
    sort_keys: bool = False
    raw_input: bool = False
    null_input: bool = False
    from_file: bool = False
    join_output: bool = False
    seq: bool = False
    stream: bool = False
    stream_errors: bool = False
    exit_status: bool = False


def _die(message: str) -> Exit:
    return Exit(2, message + HELP_HINT)


def _is_optish(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and (text[1] == "-" or text[1].isalpha())


def parse(argv: list[str]) -> Options:
    """Options from the arguments after the program name; Exit for usage errors and --help."""
    opts = Options()
    strings = jsons = done = False
    i = 0

    def operand(text: str) -> None:
        if strings:
            opts.positional.append(("string", text))
        elif jsons:
            opts.positional.append(("json", text))
        else:
            opts.files.append(text)

    while i < len(argv):
        text = argv[i]
        i += 1
        if done:
            operand(text)
            continue
        if text == "--":
            if opts.program is None:
                raise Exit(2, USAGE + SHORT_USAGE)
            done = True
            continue
        if not _is_optish(text):
            if opts.program is None:
                opts.program = text
            else:
                operand(text)
            continue
        if text[1] == "L":
            opts.library_paths = opts.library_paths or []
            if len(text) > 2:
                opts.library_paths.append(text[2:])
            elif i >= len(argv):
                raise _die("-L takes a parameter: (e.g. -L /search/path or -L/search/path)\n")
            else:
                opts.library_paths.append(argv[i])
                i += 1
            continue
        if text.startswith("--"):
            i = _long(opts, text[2:], argv, i)
            if text[2:] == "args":
                strings, jsons = True, False
            elif text[2:] == "jsonargs":
                strings, jsons = False, True
            continue
        letters = text[1:]
        for letter in letters:
            attribute = next((a for s, _, a in FLAGS if s == letter), None)
            if letter == "c":
                opts.dumpopts &= COMPACT
            elif attribute is not None:
                setattr(opts, attribute, True)
            elif letter == "h":
                raise Exit(0, out=USAGE + _long_help())
            elif letter == "V":
                raise Exit(0, out=f"jq-{VERSION}\n")
            else:
                raise _die(f"{PROGNAME}: Unknown option {text}\n")
    return opts


def _long(opts: Options, name: str, argv: list[str], i: int) -> int:
    """Apply the long option `name`; returns the index of the next argument."""
    attribute = next((a for _, n, a in FLAGS if n == name), None)
    if name == "compact-output":
        opts.dumpopts &= COMPACT
        return i
    if attribute is not None:
        setattr(opts, attribute, True)
        return i
    if name in ("args", "jsonargs", "debug-dump-disasm", "debug-trace", "debug-trace=all"):
        return i
    if name == "tab":
        opts.dumpopts = opts.dumpopts & ~indent_flags(7) | PRINT_TAB | PRINT_PRETTY
        return i
    if name == "indent":
        if i >= len(argv):
            raise _die(f"{PROGNAME}: --indent takes one parameter\n")
        try:
            indent = int(argv[i])
        except ValueError:
            indent = 0  # atoi
        if indent < -1 or indent > 7:
            raise _die(f"{PROGNAME}: --indent takes a number between -1 and 7\n")
        opts.dumpopts = opts.dumpopts & COMPACT | indent_flags(indent)
        return i + 1
    if name in ("arg", "argjson", *FILE_ARGS):
        if i + 1 >= len(argv):
            example = {"arg": "varname value", "argjson": "varname text"}.get(
                name, "varname filename"
            )
            raise _die(f"{PROGNAME}: --{name} takes two parameters (e.g. --{name} {example})\n")
        opts.named.setdefault(argv[i], (name, argv[i + 1]))
        return i + 2
    if name == "help":
        raise Exit(0, out=USAGE + _long_help())
    if name == "version":
        raise Exit(0, out=f"jq-{VERSION}\n")
    raise _die(f"{PROGNAME}: Unknown option --{name}\n")


def _long_help() -> str:
    return """Some of the options include:
  -c               compact instead of pretty-printed output;
  -n               use `null` as the single input value;
  -e               set the exit status code based on the output;
  -s               read (slurp) all inputs into an array; apply filter to it;
  -r               output raw strings, not JSON texts;
  -R               read raw strings, not JSON texts;
  -C               colorize JSON;
  -M               monochrome (don't colorize JSON);
  -S               sort keys of objects on output;
  --tab            use tabs for indentation;
  --arg a v        set variable $a to value <v>;
  --argjson a v    set variable $a to JSON value <v>;
  --slurpfile a f  set variable $a to an array of JSON texts read from <f>;
  --rawfile a f    set variable $a to a string consisting of the contents of <f>;
  --args           remaining arguments are string arguments, not files;
  --jsonargs       remaining arguments are JSON arguments, not files;
  --               terminates argument processing;

Named arguments are also available as $ARGS.named[], while
positional arguments are available as $ARGS.positional[].

See the manpage for more options.
"""
