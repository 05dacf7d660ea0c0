"""The texts an imported program-rebuild task is written with (str.format templates)."""

# ruff: noqa: E501  (task.toml's eval command is one line)

TASK_TOML = """\
# Rebuild {program} from its manual: a program-rebuild task made by `swarm task import
# debian:{package}`. `swarm task prepare` downloads Debian's packages (cached) and builds
# start/, hidden/, oracle/, solution/ and goal.md here; none of them is committed.
name = "{name}"
goal = "goal.md"
start = "start"
hidden_tests = "hidden"
eval_command = 'PYTHONPATH="$PWD" python {{hidden}}/cli_tests.py {{hidden}}/tests.jsonl -- {implementation}'
eval_timeout = 1800
budget = "{budget}"
oracle = "oracle/{program}"
{solution}prepare = "debian"

[prepare_options]
package = "{package}"
{pinned}"""

WRAPPER = """\
#!/bin/sh
# {label} from Debian, unpacked (not installed) by `swarm task prepare`.
here=$(dirname "$(readlink -f "$0")")
exec {start} "$here/{executable}" "$@"
"""

README = """\
# {program}, rebuilt in {language}

This repository is to become `{program}` {upstream}, written from its manual,
`docs/manual.md` ({title}). It is run from this folder as

    {implementation} ARGS...

and must do what `{program} ARGS...` does: the same standard output, the same exit
status, the same error messages. The hidden tests run it with arguments and
standard input, each in an empty working folder of its own, with `PYTHONPATH`
set to this folder.
"""

GOAL = """\
# Goal: rebuild `{program}` {upstream} in {language}

Write a program that behaves exactly as `{program}` {upstream} does ({description}).
It is run from the top of the repository as

    {implementation} ARGS...

and must print what `{program} ARGS...` prints on standard output, exit with the same
status, and on errors say on standard error what `{program}` says. The repository starts
with `README.md` and `docs/manual.md`, {program}'s own manual (from Debian's source
package {source}): the documentation to rebuild from. Read it; it defines the behaviour.

{tests}

The manual's sections: {sections}.
{oracle}"""

ORACLE_NOTE = """
The original program ({label} from Debian) can be run but not read: `sw oracle ARGS... <
input` runs it on the hub, outside your sandbox, prints what it printed and exits with its
status (`sw oracle --help`). Ask it whenever the manual leaves a doubt, for example:

    sw oracle {example}
"""
