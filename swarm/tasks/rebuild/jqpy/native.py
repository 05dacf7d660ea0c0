"""jq's C library (libjq 1.6, and the oniguruma it links), loaded from the base64 copies
beside this module, and the part of its API that jq's command line uses.

The libraries are loaded from memory (memfd) when the system allows it, else from a private
temporary file: nothing is installed, and the checkout holds only text.
"""

from __future__ import annotations

import base64
import ctypes
import os
import tempfile
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_double, c_int, c_void_p
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Dependencies first: libjq's DT_NEEDED entry is then met by the loaded library's soname.
LIBRARIES = ("libonig.so.5", "libjq.so.1")

KIND_INVALID, KIND_NULL, KIND_FALSE, KIND_TRUE, KIND_NUMBER = 0, 1, 2, 3, 4
KIND_STRING, KIND_ARRAY, KIND_OBJECT = 5, 6, 7
PARSE_SEQ, PARSE_STREAMING, PARSE_STREAM_ERRORS = 1, 2, 4


class _Payload(ctypes.Union):
    _fields_ = [("ptr", c_void_p), ("number", c_double)]


class Jv(ctypes.Structure):
    """jv.h's `jv`: 16 bytes, passed and returned by value."""

    _fields_ = [
        ("kind_flags", ctypes.c_ubyte),
        ("pad_", ctypes.c_ubyte),
        ("offset", ctypes.c_ushort),
        ("size", c_int),
        ("u", _Payload),
    ]


MsgCallback = CFUNCTYPE(None, c_void_p, Jv)

# name: (result, argument types) of every function used, as jq.h and jv.h declare them.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "jq_init": (c_void_p, []),
    "jq_teardown": (None, [POINTER(c_void_p)]),
    "jq_set_attr": (None, [c_void_p, Jv, Jv]),
    "jq_compile_args": (c_int, [c_void_p, c_char_p, Jv]),
    "jq_start": (None, [c_void_p, Jv, c_int]),
    "jq_next": (Jv, [c_void_p]),
    "jq_halted": (c_int, [c_void_p]),
    "jq_get_exit_code": (Jv, [c_void_p]),
    "jq_get_error_message": (Jv, [c_void_p]),
    "jq_set_input_cb": (None, [c_void_p, c_void_p, c_void_p]),
    "jq_set_debug_cb": (None, [c_void_p, MsgCallback, c_void_p]),
    "jq_set_colors": (c_int, [c_char_p]),
    "jq_realpath": (Jv, [Jv]),
    "jq_util_input_init": (c_void_p, [c_void_p, c_void_p]),
    "jq_util_input_add_input": (None, [c_void_p, c_char_p]),
    "jq_util_input_set_parser": (None, [c_void_p, c_void_p, c_int]),
    "jq_util_input_next_input": (Jv, [c_void_p]),
    "jq_util_input_errors": (c_int, [c_void_p]),
    "jq_util_input_get_position": (Jv, [c_void_p]),
    "jq_util_input_free": (None, [POINTER(c_void_p)]),
    "jv_parser_new": (c_void_p, [c_int]),
    "jv_parse_sized": (Jv, [c_char_p, c_int]),
    "jv_load_file": (Jv, [c_char_p, c_int]),
    "jv_get_kind": (c_int, [Jv]),
    "jv_copy": (Jv, [Jv]),
    "jv_free": (None, [Jv]),
    "jv_null": (Jv, []),
    "jv_string_sized": (Jv, [c_char_p, c_int]),
    "jv_string_value": (c_void_p, [Jv]),
    "jv_string_length_bytes": (c_int, [Jv]),
    "jv_dump_string": (Jv, [Jv, c_int]),
    "jv_invalid_has_msg": (c_int, [Jv]),
    "jv_invalid_get_msg": (Jv, [Jv]),
    "jv_number_value": (c_double, [Jv]),
    "jv_array": (Jv, []),
    "jv_array_append": (Jv, [Jv, Jv]),
    "jv_array_get": (Jv, [Jv, c_int]),
    "jv_array_length": (c_int, [Jv]),
    "jv_object": (Jv, []),
    "jv_object_set": (Jv, [Jv, Jv, Jv]),
    "jv_object_has": (c_int, [Jv, Jv]),
}


def _open(name: str, data: bytes) -> str:
    """A path the dynamic loader can open that holds `data`."""
    try:
        fd = os.memfd_create(name)
    except (AttributeError, OSError):
        handle, path = tempfile.mkstemp(prefix=f"jqpy-{name}-")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        return path
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return f"/proc/self/fd/{fd}"


def load() -> ctypes.CDLL:
    """libjq with its dependencies loaded first; each function typed as its header says."""
    lib: ctypes.CDLL | None = None
    for name in LIBRARIES:
        data = base64.b64decode((HERE / f"{name}.b64").read_bytes())
        lib = ctypes.CDLL(_open(name, data), mode=ctypes.RTLD_GLOBAL)
    assert lib is not None
    for function, (result, arguments) in _SIGNATURES.items():
        entry = getattr(lib, function)
        entry.restype = result
        entry.argtypes = arguments
    return lib


LIB = load()


def text(value: Jv) -> str:
    """The text of a jv string (the string itself is kept)."""
    size = LIB.jv_string_length_bytes(LIB.jv_copy(value))
    raw = ctypes.string_at(LIB.jv_string_value(value), size)
    return raw.decode("utf-8", errors="surrogateescape")


def string(value: str) -> Jv:
    raw = value.encode("utf-8", errors="surrogateescape")
    result: Jv = LIB.jv_string_sized(raw, len(raw))
    return result


def parse(value: str) -> Jv:
    """One JSON text (an invalid jv with a message when it is not)."""
    raw = value.encode("utf-8", errors="surrogateescape")
    result: Jv = LIB.jv_parse_sized(raw, len(raw))
    return result


def kind(value: Jv) -> int:
    result: int = LIB.jv_get_kind(value)
    return result


def dump(value: Jv, flags: int) -> str:
    """jv_dump_string (consumes `value`)."""
    dumped = LIB.jv_dump_string(value, flags)
    out = text(dumped)
    LIB.jv_free(dumped)
    return out
