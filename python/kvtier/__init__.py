"""kvtier from Python: a thin ctypes binding of the C API (include/kvtier/c_api.h).

A serving engine written in Python (vLLM, SGLang) loads libkvtier.so through
this module; nothing needs compiling. The library is found through the
`library` argument, else the KVTIER_LIBRARY environment variable, else beside
the installed module (`cmake --install` puts it in <libdir>/kvtier/python),
else the system's library path.

    import kvtier
    with kvtier.Runtime(config_path="kvtier.yaml") as rt:
        keys = rt.key_chain(token_ids)
        hits, tiers = rt.lookup(keys)
        rt.save(keys, engine_blocks).wait()

Keys are (hi, lo) tuples of two 64-bit integers. A failing call raises
KvtierError with the code and message of the C API; per-block outcomes of a
save or load are codes in Completion.results(), where KVTIER_OK is 0 and a
miss is NOT_FOUND.
"""

from ._convert import Keys
from ._lib import (BUSY, C_API_VERSION, CANCELLED, CORRUPTION, DEADLINE_EXCEEDED, INTERNAL,
                   INVALID_ARGUMENT, IO_ERROR, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARNING,
                   NOT_FOUND, NOT_SUPPORTED, OK, RESOURCE_EXHAUSTED, UNAVAILABLE, KvtierError,
                   code_name, load_library, version)
from .completion import Completion, Pin
from .runtime import Runtime, logging_sink

__all__ = [
    "BUSY", "C_API_VERSION", "CANCELLED", "CORRUPTION", "DEADLINE_EXCEEDED", "INTERNAL",
    "INVALID_ARGUMENT", "IO_ERROR", "LOG_DEBUG", "LOG_ERROR", "LOG_INFO", "LOG_WARNING",
    "NOT_FOUND", "NOT_SUPPORTED", "OK", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "Completion",
    "Keys", "KvtierError", "Pin", "Runtime", "code_name", "load_library", "logging_sink",
    "version",
]
