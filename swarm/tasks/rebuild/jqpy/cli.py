"""`python -m jqpy`: jq 1.6's main() and process(), over libjq (see native.py).

The statuses are main.c's: 2 usage and I/O errors, 3 a program that does not compile, 4 a
parse error in the input (or, with -e, no output), 5 an uncaught error, 1 with -e when the
last output was false or null; halt_error's own status.
"""

from __future__ import annotations

import os
import sys
from ctypes import byref, c_void_p, cast
from typing import BinaryIO

from . import native
from .native import LIB, Jv
from .options import (
    PRINT_ASCII,
    PRINT_COLOR,
    PRINT_ISATTY,
    PRINT_PRETTY,
    PRINT_SORTED,
    PROGNAME,
    SHORT_USAGE,
    USAGE,
    Exit,
    Options,
    parse,
)

NO_OUTPUT = 14  # main.c: no valid result, and -e makes it 4


def _err(text: str) -> None:
    os.write(2, text.encode("utf-8", errors="surrogateescape"))


class Run:
    """One jq invocation: the jq state, its inputs and where the results go."""

    def __init__(self, opts: Options, out: BinaryIO) -> None:
        self.opts = opts
        self.out = out
        self.exact_status = False
        self.jq = c_void_p(LIB.jq_init())
        self.inputs = c_void_p(LIB.jq_util_input_init(None, None))
        self.dumpopts = opts.dumpopts
        # Kept referenced: libjq calls it for `debug` for as long as the state lives.
        self._debug = native.MsgCallback(self._on_debug)

    def _on_debug(self, _data: object, value: Jv) -> None:
        pair = LIB.jv_array_append(
            LIB.jv_array_append(LIB.jv_array(), native.string("DEBUG:")), value
        )
        _err(native.dump(pair, self.dumpopts & ~PRINT_PRETTY) + "\n")

    def close(self) -> None:
        LIB.jq_util_input_free(byref(self.inputs))
        LIB.jq_teardown(byref(self.jq))

    def named_arguments(self) -> Jv:
        named: Jv = LIB.jv_object()
        for name, (kind, value) in self.opts.named.items():
            if kind == "arg":
                item = native.string(value)
            elif kind == "argjson":
                item = native.parse(value)
                if native.kind(item) == native.KIND_INVALID:
                    LIB.jv_free(item)
                    raise Exit(2, f"{PROGNAME}: invalid JSON text passed to --argjson\n")
            else:
                item = LIB.jv_load_file(value.encode(), int(kind == "rawfile"))
                if native.kind(item) == native.KIND_INVALID:
                    why = native.text(message := LIB.jv_invalid_get_msg(item))
                    LIB.jv_free(message)
                    raise Exit(2, f"{PROGNAME}: Bad JSON in --{kind} {name} {value}: {why}\n")
                if (
                    kind == "argfile"
                    and native.kind(item) == native.KIND_ARRAY
                    and LIB.jv_array_length(LIB.jv_copy(item)) == 1
                ):
                    item = LIB.jv_array_get(item, 0)
            named = LIB.jv_object_set(named, native.string(name), item)
        return named

    def compile(self) -> bool:
        opts = self.opts
        paths = opts.library_paths
        if paths is None:
            search = ["~/.jq", "$ORIGIN/../lib/jq", "$ORIGIN/lib"]
            library = LIB.jv_array()
            for path in search:
                library = LIB.jv_array_append(library, native.string(path))
        else:
            library = LIB.jv_array()
            for path in paths:
                library = LIB.jv_array_append(library, LIB.jq_realpath(native.string(path)))
        LIB.jq_set_attr(self.jq, native.string("JQ_LIBRARY_PATH"), library)
        here = os.path.dirname(os.path.abspath(sys.argv[0] or "."))
        LIB.jq_set_attr(self.jq, native.string("JQ_ORIGIN"), native.string(here))
        LIB.jq_set_attr(self.jq, native.string("VERSION_DIR"), native.string("1.6"))
        program = opts.program or "."
        origin = "."
        if opts.from_file:
            data = LIB.jv_load_file(program.encode(), 1)
            if native.kind(data) == native.KIND_INVALID:
                why = native.text(message := LIB.jv_invalid_get_msg(data))
                LIB.jv_free(message)
                raise Exit(2, f"{PROGNAME}: {why}\n")
            source = native.text(data)
            LIB.jv_free(data)
            if "\x00" in source:
                raise Exit(2, "jq: program file contains NUL bytes\n")
            origin = os.path.dirname(program) or "."
            program = _skip_shebang(source)
        LIB.jq_set_attr(
            self.jq, native.string("PROGRAM_ORIGIN"), LIB.jq_realpath(native.string(origin))
        )
        positional = LIB.jv_array()
        for kind, value in opts.positional:
            item = native.string(value) if kind == "string" else native.parse(value)
            positional = LIB.jv_array_append(positional, item)
        named = self.named_arguments()
        arguments = LIB.jv_object_set(
            LIB.jv_object_set(LIB.jv_object(), native.string("positional"), positional),
            native.string("named"),
            LIB.jv_copy(named),
        )
        named = LIB.jv_object_set(named, native.string("ARGS"), arguments)
        encoded = program.encode("utf-8", errors="surrogateescape")
        return bool(LIB.jq_compile_args(self.jq, encoded, named))

    def process(self, value: Jv) -> int:
        """main.c's process(): run the program on one input, print its results."""
        opts, status = self.opts, NO_OUTPUT
        LIB.jq_start(self.jq, value, 0)
        while True:
            result = LIB.jq_next(self.jq)
            kind = native.kind(result)
            if kind == native.KIND_INVALID:
                break
            if opts.raw_output and kind == native.KIND_STRING:
                if opts.ascii:
                    self.out.write(native.dump(result, PRINT_ASCII).encode())
                else:
                    self.out.write(native.text(result).encode("utf-8", errors="surrogateescape"))
                    LIB.jv_free(result)
                status = 0
            else:
                status = 11 if kind in (native.KIND_FALSE, native.KIND_NULL) else 0
                if opts.seq:
                    self.out.write(b"\x1e")
                self.out.write(
                    native.dump(result, self.dumpopts).encode("utf-8", "surrogateescape")
                )
            if not opts.join_output:
                self.out.write(b"\n")
            if opts.unbuffered:
                self.out.flush()
        if LIB.jq_halted(self.jq):
            LIB.jv_free(result)
            return self._halted()
        if LIB.jv_invalid_has_msg(LIB.jv_copy(result)):
            message = LIB.jv_invalid_get_msg(result)
            where = LIB.jq_util_input_get_position(self.jq)
            self.out.flush()
            if native.kind(message) == native.KIND_STRING:
                _err(f"jq: error (at {native.text(where)}): {native.text(message)}\n")
                LIB.jv_free(message)
            else:
                shown = native.dump(message, 0)
                _err(f"jq: error (at {native.text(where)}) (not a string): {shown}\n")
            LIB.jv_free(where)
            return 5
        LIB.jv_free(result)
        return status

    def _halted(self) -> int:
        self.exact_status = True
        code = LIB.jq_get_exit_code(self.jq)
        kind = native.kind(code)
        status = 0 if kind == native.KIND_INVALID else 5
        if kind == native.KIND_NUMBER:
            status = int(LIB.jv_number_value(code))
        LIB.jv_free(code)
        message = LIB.jq_get_error_message(self.jq)
        kind = native.kind(message)
        self.out.flush()
        if kind == native.KIND_STRING:
            _err(native.text(message))
            LIB.jv_free(message)
        elif kind not in (native.KIND_NULL, native.KIND_INVALID):
            _err(native.dump(message, 0) + "\n")
        else:
            LIB.jv_free(message)
        return status

    def inputs_loop(self) -> int:
        opts, status = self.opts, 0
        flags = native.PARSE_SEQ if opts.seq else 0
        if opts.stream:
            flags |= native.PARSE_STREAMING
        if opts.stream_errors:
            flags |= native.PARSE_STREAM_ERRORS
        parser = None if opts.raw_input else LIB.jv_parser_new(flags)
        LIB.jq_util_input_set_parser(self.inputs, parser, int(opts.slurp))
        next_input = cast(LIB.jq_util_input_next_input_cb, c_void_p)
        LIB.jq_set_input_cb(self.jq, next_input, self.inputs)
        LIB.jq_set_debug_cb(self.jq, self._debug, None)
        for name in opts.files or ["-"]:
            LIB.jq_util_input_add_input(self.inputs, name.encode("utf-8", "surrogateescape"))
        if opts.null_input:
            return self.process(LIB.jv_null())
        while LIB.jq_util_input_errors(self.inputs) == 0:
            value = LIB.jq_util_input_next_input(self.inputs)
            if native.kind(value) != native.KIND_INVALID:
                status = self.process(value)
                continue
            if not LIB.jv_invalid_has_msg(LIB.jv_copy(value)):
                LIB.jv_free(value)
                break
            message = LIB.jv_invalid_get_msg(value)
            text = native.text(message)
            LIB.jv_free(message)
            self.out.flush()
            if not opts.seq:
                _err(f"parse error: {text}\n")
                status = 4
                break
            _err(f"ignoring parse error: {text}\n")
        if LIB.jq_util_input_errors(self.inputs) != 0:
            status = 2
        return status


def _skip_shebang(source: str) -> str:
    """main.c's skip_shebang: a `#!` line continued by a `#` line ending in a backslash."""
    if not source.startswith("#!"):
        return source
    first = source.find("\n")
    if first < 0 or source[first + 1 : first + 2] != "#":
        return source
    second = source.find("\n", first + 1)
    if (
        second < 0
        or source[second + 1 : second + 2] in ("#", "")
        or source[second - 1] != "\\"
        or source[second - 2] == "\\"
    ):
        return source
    third = source.find("\n", second + 1)
    return source if third < 0 else source[third + 1 :]


def main(argv: list[str]) -> int:
    try:
        opts = parse(argv)
    except Exit as stop:
        sys.stdout.write(stop.out)
        _err(stop.message)
        return stop.code
    if opts.program is None and os.isatty(0) and os.isatty(1):
        _err(USAGE + SHORT_USAGE)
        return 2
    out = sys.stdout.buffer
    run = Run(opts, out)
    status = 0
    try:
        if os.isatty(1):
            run.dumpopts |= PRINT_ISATTY | PRINT_COLOR
        if opts.sort_keys:
            run.dumpopts |= PRINT_SORTED
        if opts.ascii:
            run.dumpopts |= PRINT_ASCII
        if opts.color:
            run.dumpopts |= PRINT_COLOR
        if opts.monochrome:
            run.dumpopts &= ~PRINT_COLOR
        colors = os.environ.get("JQ_COLORS")
        if colors is not None and not LIB.jq_set_colors(colors.encode()):
            _err("Failed to set $JQ_COLORS\n")
        if not run.compile():
            return 3
        status = run.inputs_loop()
    except Exit as stop:
        _err(stop.message)
        return stop.code
    finally:
        try:
            out.flush()
        except OSError as exc:
            _err(f"Error: writing output failed: {exc.strerror}\n")
            status = 2
        run.close()
    if status >= 10 and opts.exit_status:
        return status - 10
    if status >= 10 and not run.exact_status:
        return 0
    return status
