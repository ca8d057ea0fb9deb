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

import array
import asyncio
import ctypes
import ctypes.util
import json
import os

C_API_VERSION = 1  # the KVTIER_C_API_VERSION of include/kvtier/c_api.h this binding follows

OK = 0
NOT_FOUND = 1
INVALID_ARGUMENT = 2
RESOURCE_EXHAUSTED = 3
UNAVAILABLE = 4
BUSY = 5
IO_ERROR = 6
CORRUPTION = 7
NOT_SUPPORTED = 8
CANCELLED = 9
DEADLINE_EXCEEDED = 10
INTERNAL = 11

LOG_DEBUG = 0
LOG_INFO = 1
LOG_WARNING = 2
LOG_ERROR = 3


class _Key(ctypes.Structure):
    _fields_ = [("hi", ctypes.c_uint64), ("lo", ctypes.c_uint64)]


class _Hints(ctypes.Structure):
    _fields_ = [
        ("session_id", ctypes.c_uint64),
        ("request_id", ctypes.c_uint64),
        ("expected_reuse", ctypes.c_float),
        ("has_expected_reuse", ctypes.c_int),
        ("bypass_admission", ctypes.c_int),
    ]


class _CudaCache(ctypes.Structure):
    _fields_ = [
        ("tensors", ctypes.POINTER(ctypes.c_void_p)),
        ("num_tensors", ctypes.c_uint32),
        ("num_blocks", ctypes.c_uint32),
        ("device", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("shape_rank", ctypes.c_uint32),
    ]


_LayerFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32)
_DoneFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_LogFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
_P = ctypes.c_void_p
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_KEYS = ctypes.POINTER(_Key)
_U32S = ctypes.POINTER(ctypes.c_uint32)

# name: (result type, argument types)
_SIGNATURES = {
    "kvtier_version_string": (ctypes.c_char_p, []),
    "kvtier_last_error": (ctypes.c_char_p, []),
    "kvtier_code_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kvtier_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                   ctypes.POINTER(_CudaCache), _LogFn, _P, ctypes.POINTER(_P)]),
    "kvtier_close": (None, [_P]),
    "kvtier_namespace": (ctypes.c_uint64, [_P]),
    "kvtier_block_bytes": (ctypes.c_uint64, [_P]),
    "kvtier_block_tokens": (ctypes.c_uint32, [_P]),
    "kvtier_engine_blocks": (ctypes.c_uint32, [_P]),
    "kvtier_key_chain": (ctypes.c_int, [_P, _KEYS, ctypes.POINTER(ctypes.c_int32),
                                        ctypes.c_size_t, _KEYS, ctypes.c_size_t, _SIZE_P]),
    "kvtier_key_from_engine_hash": (ctypes.c_int, [_P, _KEYS, ctypes.c_char_p, ctypes.c_size_t,
                                                   _KEYS]),
    "kvtier_keys_from_engine_hashes": (ctypes.c_int, [_P, _KEYS, ctypes.c_char_p, ctypes.c_size_t,
                                                      ctypes.c_size_t, _KEYS]),
    "kvtier_lookup": (ctypes.c_int, [_P, _KEYS, ctypes.c_size_t, ctypes.POINTER(_Hints), _SIZE_P,
                                     ctypes.c_char_p]),
    "kvtier_lookup_and_pin": (ctypes.c_int, [_P, _KEYS, ctypes.c_size_t, ctypes.POINTER(_Hints),
                                             _SIZE_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "kvtier_unpin": (None, [_P]),
    "kvtier_save": (ctypes.c_int, [_P, _KEYS, _KEYS, _U32S, ctypes.c_size_t,
                                   ctypes.POINTER(_Hints), ctypes.POINTER(_P)]),
    "kvtier_load": (ctypes.c_int, [_P, _KEYS, _U32S, ctypes.c_size_t, ctypes.c_int64, _LayerFn,
                                   _P, ctypes.POINTER(_P)]),
    "kvtier_request_finished": (ctypes.c_int, [_P, _KEYS, ctypes.c_size_t, ctypes.c_uint32]),
    "kvtier_remove": (ctypes.c_int, [_P, _KEYS, ctypes.c_size_t]),
    "kvtier_is_saved": (ctypes.c_int, [_P, _KEYS, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]),
    "kvtier_completion_wait": (ctypes.c_int, [_P, ctypes.c_int64]),
    "kvtier_completion_done": (ctypes.c_int, [_P]),
    "kvtier_completion_size": (ctypes.c_size_t, [_P]),
    "kvtier_completion_result": (ctypes.c_int, [_P, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_completion_layers_done": (ctypes.c_uint32, [_P]),
    "kvtier_completion_on_done": (ctypes.c_int, [_P, _DoneFn, _P]),
    "kvtier_completion_free": (None, [_P]),
    "kvtier_report_engine_usage": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_uint32]),
    "kvtier_track_request": (ctypes.c_int, [_P, ctypes.c_uint64, _KEYS, ctypes.c_size_t,
                                            ctypes.c_uint32]),
    "kvtier_untrack_request": (None, [_P, ctypes.c_uint64]),
    "kvtier_should_admit": (ctypes.c_int, [_P, ctypes.c_uint32]),
    "kvtier_propose_preemption": (ctypes.c_int, [_P, ctypes.c_uint32,
                                                 ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                                 _SIZE_P]),
    "kvtier_stats_json": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "kvtier_metrics_text": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "kvtier_host_block_write": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_char_p,
                                               ctypes.c_size_t]),
    "kvtier_host_block_read": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_char_p,
                                              ctypes.c_size_t]),
}

_lib = None


def _installed_library():
    """The library beside an installed copy of this module, which `cmake
    --install` puts in <libdir>/kvtier/python, two levels below it."""
    here = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(here)
    if os.path.basename(here) != "python" or os.path.basename(parent) != "kvtier":
        return None
    libdir = os.path.dirname(parent)
    try:
        names = sorted(n for n in os.listdir(libdir) if n.startswith("libkvtier.so"))
    except OSError:
        return None
    return os.path.join(libdir, names[0]) if names else None


def load_library(path=None):
    """Loads libkvtier once: `path`, else $KVTIER_LIBRARY, else the one installed
    beside this module, else the system's."""
    global _lib
    if _lib is not None:
        return _lib
    path = (path or os.environ.get("KVTIER_LIBRARY") or _installed_library()
            or ctypes.util.find_library("kvtier"))
    if not path:
        raise OSError("libkvtier not found: pass library= or set KVTIER_LIBRARY")
    lib = ctypes.CDLL(path)
    lib.kvtier_c_api_version.restype = ctypes.c_int
    version = lib.kvtier_c_api_version()
    if version != C_API_VERSION:
        raise OSError(f"{path} has C API version {version}; this binding is for "
                      f"{C_API_VERSION}")
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib = lib
    return lib


class KvtierError(Exception):
    """A failing C API call: `code` (an int, e.g. INVALID_ARGUMENT) and its message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def version():
    """The loaded library's version, "major.minor.patch"."""
    return load_library().kvtier_version_string().decode()


def logging_sink(logger):
    """A `log` for Runtime that writes to a logging.Logger at the matching level."""
    levels = {LOG_DEBUG: 10, LOG_INFO: 20, LOG_WARNING: 30, LOG_ERROR: 40}
    return lambda level, message: logger.log(levels.get(level, 40), "%s", message)


def code_name(code):
    return load_library().kvtier_code_name(code).decode()


def _check(code):
    if code != OK:
        raise KvtierError(code, _lib.kvtier_last_error().decode())


class Keys:
    """Block keys in one C array, as key_chain returns them: a sequence of
    (hi, lo) tuples that calls take without converting, and whose slices
    (step 1) share the array."""

    __slots__ = ("_array", "_start", "_len")

    def __init__(self, array, start=0, length=None):
        self._array = array
        self._start = start
        self._len = len(array) - start if length is None else length

    def __len__(self):
        return self._len

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return Keys(self._array, self._start + start, max(stop - start, 0))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("key index out of range")
        k = self._array[self._start + index]
        return (k.hi, k.lo)

    def __iter__(self):
        for i in range(self._len):
            k = self._array[self._start + i]
            yield (k.hi, k.lo)

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return f"Keys({list(self)!r})"

    def _pointer(self):
        if self._len == 0:
            return None
        offset = self._start * ctypes.sizeof(_Key)
        return ctypes.cast(ctypes.byref(self._array, offset), _KEYS)


def _keys(keys):
    if isinstance(keys, Keys):
        return keys._pointer()
    array = (_Key * len(keys))()
    for i, (hi, lo) in enumerate(keys):
        array[i].hi = hi
        array[i].lo = lo
    return array


def _ints(values, ctype, typecodes):
    """A C array of `values`: a straight copy of an array.array or NumPy array
    of the matching 4-byte integer type, else through an array.array of
    typecodes[0] (which also range-checks each value)."""
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is None or view.itemsize != 4 or view.format not in typecodes or view.ndim != 1:
        view = memoryview(array.array(typecodes[0], values))
    return (ctype * len(view)).from_buffer_copy(view.cast("B") if view.c_contiguous
                                                else view.tobytes())


def _key_ptr(key):
    return None if key is None else ctypes.pointer(_Key(key[0], key[1]))


def _u32s(values):
    return _ints(values, ctypes.c_uint32, ("I", "L", "=I", "<I"))


def _hints(session_id, request_id, expected_reuse, bypass_admission):
    if not (session_id or request_id or bypass_admission) and expected_reuse is None:
        return None
    h = _Hints(session_id, request_id, 0.0, 0, int(bool(bypass_admission)))
    if expected_reuse is not None:
        h.expected_reuse = expected_reuse
        h.has_expected_reuse = 1
    return ctypes.byref(h)


def _ns(timeout_s):
    return -1 if timeout_s is None else int(timeout_s * 1e9)


class Completion:
    """The outcome of one save or load, one result per block."""

    def __init__(self, handle, keepalive=None):
        self._handle = handle
        # Callbacks kvtier may still call: kept alive until the work is done.
        self._keepalive = [keepalive] if keepalive is not None else []

    def wait(self, timeout_s=None):
        """Waits (at most timeout_s; None: no limit) and returns the call's code:
        OK, the first block's failure, or DEADLINE_EXCEEDED while still running."""
        return _lib.kvtier_completion_wait(self._handle, _ns(timeout_s))

    @property
    def done(self):
        return bool(_lib.kvtier_completion_done(self._handle))

    @property
    def layers_done(self):
        return _lib.kvtier_completion_layers_done(self._handle)

    def results(self):
        """[(code, bytes)] per block; waits for the completion first."""
        self.wait()
        out = []
        for i in range(_lib.kvtier_completion_size(self._handle)):
            nbytes = ctypes.c_uint64(0)
            code = _lib.kvtier_completion_result(self._handle, i, ctypes.byref(nbytes))
            out.append((code, nbytes.value))
        return out

    def add_done_callback(self, fn):
        """Calls fn() once the results are final, on a kvtier thread (or here, if
        they are already). It takes the GIL: keep it short, e.g. wake a loop."""
        callback = _DoneFn(lambda _user: fn())
        self._keepalive.append(callback)
        _check(_lib.kvtier_completion_on_done(self._handle, callback, None))

    async def wait_async(self):
        """Awaits the completion without blocking the event loop; returns wait()'s code."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        self.add_done_callback(wake)
        await done
        return self.wait()

    def free(self):
        if self._handle:
            if self._keepalive:
                self.wait()  # the callbacks must outlive every call of them
            _lib.kvtier_completion_free(self._handle)
            self._handle = None

    def __del__(self):
        if _lib is not None:
            self.free()


class Pin:
    """Hits a lookup keeps in the hub until release() (or the end of a `with`)."""

    def __init__(self, handle, hit_blocks, tiers):
        self._handle = handle
        self.hit_blocks = hit_blocks
        self.tiers = tiers

    def release(self):
        if self._handle:
            _lib.kvtier_unpin(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if _lib is not None:
            self.release()


class Runtime:
    """A kvtier runtime for one model, opened from one YAML configuration.

    config_path or config_text (exactly one) and `overrides` ("path=value"
    strings) give the config. Without cuda_tensors the runtime copies to and
    from the host stand-in engine (host_block_write / host_block_read reach
    its pages). With them it copies to the engine's cache on a GPU:
    cuda_tensors are the device addresses of its tensors (one per layer, or
    the one cross-layer tensor; with PyTorch, `t.data_ptr()`),
    cuda_num_blocks the pages in the pool, cuda_device the device ordinal,
    cuda_stream the engine's compute stream as an integer
    (`torch.cuda.current_stream().cuda_stream`), or None for the default one,
    and cuda_shape the tensors' shape (`tuple(t.shape)`): given, it is checked
    against the config's model (and sets cuda_num_blocks when that is 0).
    """

    def __init__(self, config_path=None, config_text=None, overrides=(), cuda_tensors=None,
                 cuda_num_blocks=0, cuda_device=0, cuda_stream=None, cuda_shape=None,
                 log=None, library=None):
        self._rt = None  # closed, until kvtier_open succeeds
        # log(level, message) gets the runtime's lines at LOG_INFO and up, on its
        # threads (logging_sink(logger) routes them to logging); None: stderr.
        self._log = (_LogFn(lambda _user, level, message:
                            log(level, message.decode(errors="replace")))
                     if log is not None else _LogFn())
        lib = load_library(library)
        sets = [s.encode() for s in overrides]
        c_sets = (ctypes.c_char_p * len(sets))(*sets) if sets else None
        cuda = None
        if cuda_tensors is not None:
            ptrs = (ctypes.c_void_p * len(cuda_tensors))(*cuda_tensors)
            shape = (ctypes.c_uint64 * len(cuda_shape))(*cuda_shape) if cuda_shape else None
            cuda = ctypes.pointer(_CudaCache(ptrs, len(cuda_tensors), cuda_num_blocks,
                                             cuda_device, cuda_stream, shape,
                                             len(cuda_shape) if cuda_shape else 0))
        handle = _P()
        _check(lib.kvtier_open(config_path.encode() if config_path is not None else None,
                               config_text.encode() if config_text is not None else None,
                               c_sets, len(sets), cuda, self._log, None,
                               ctypes.byref(handle)))
        self._rt = handle

    def close(self):
        if self._rt:
            _lib.kvtier_close(self._rt)
            self._rt = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if _lib is not None:
            self.close()

    @property
    def namespace(self):
        return _lib.kvtier_namespace(self._rt)

    @property
    def block_bytes(self):
        return _lib.kvtier_block_bytes(self._rt)

    @property
    def block_tokens(self):
        return _lib.kvtier_block_tokens(self._rt)

    @property
    def engine_blocks(self):
        """Pages of the engine's pool: engine block ids are below this."""
        return _lib.kvtier_engine_blocks(self._rt)

    def key_chain(self, tokens, parent=None):
        """Keys of the full blocks of `tokens` (a list, or faster an array.array('i')
        or an int32 NumPy array), continuing `parent` (None: first block), as Keys."""
        c_tokens = _ints(tokens, ctypes.c_int32, ("i", "l", "=i", "<i"))
        n = len(c_tokens) // self.block_tokens
        out = (_Key * n)()
        count = ctypes.c_size_t(0)
        _check(_lib.kvtier_key_chain(self._rt, _key_ptr(parent), c_tokens, len(c_tokens),
                                     out if n else None, n, ctypes.byref(count)))
        return Keys(out, 0, count.value)

    def key_from_engine_hash(self, engine_hash, parent=None):
        out = _Key()
        _check(_lib.kvtier_key_from_engine_hash(self._rt, _key_ptr(parent), bytes(engine_hash),
                                                len(engine_hash), ctypes.byref(out)))
        return (out.hi, out.lo)

    def keys_from_engine_hashes(self, hashes, parent=None):
        """Keys of consecutive blocks named by the engine's block hashes (bytes
        objects of one length), continuing `parent`, in one call, as Keys."""
        hashes = [bytes(h) for h in hashes]
        size = len(hashes[0]) if hashes else 0
        if any(len(h) != size for h in hashes):
            raise KvtierError(INVALID_ARGUMENT, "engine hashes must all have one length")
        out = (_Key * len(hashes))()
        _check(_lib.kvtier_keys_from_engine_hashes(self._rt, _key_ptr(parent), b"".join(hashes),
                                                   size, len(hashes), out if hashes else None))
        return Keys(out)

    def lookup(self, keys, session_id=0, request_id=0, expected_reuse=None):
        """(leading keys stored, [tier index of each hit, 0 = host hub])."""
        hits = ctypes.c_size_t(0)
        tiers = ctypes.create_string_buffer(len(keys))
        _check(_lib.kvtier_lookup(self._rt, _keys(keys), len(keys),
                                  _hints(session_id, request_id, expected_reuse, False),
                                  ctypes.byref(hits), tiers))
        return hits.value, list(tiers.raw[:hits.value])

    def lookup_and_pin(self, keys, session_id=0, request_id=0, expected_reuse=None):
        """As lookup, and keeps the hits from being evicted until the returned
        Pin is released: look a request up when it is scheduled, load it later."""
        hits = ctypes.c_size_t(0)
        tiers = ctypes.create_string_buffer(len(keys))
        handle = _P()
        _check(_lib.kvtier_lookup_and_pin(self._rt, _keys(keys), len(keys),
                                          _hints(session_id, request_id, expected_reuse, False),
                                          ctypes.byref(hits), tiers, ctypes.byref(handle)))
        return Pin(handle, hits.value, list(tiers.raw[:hits.value]))

    def save(self, keys, engine_blocks, parent=None, session_id=0, expected_reuse=None,
             bypass_admission=False):
        """Starts copying engine_blocks[i] in as keys[i]; returns a Completion."""
        if len(engine_blocks) != len(keys):
            raise KvtierError(INVALID_ARGUMENT, "save: one engine block per key")
        handle = _P()
        _check(_lib.kvtier_save(self._rt, _key_ptr(parent), _keys(keys), _u32s(engine_blocks),
                                len(keys), _hints(session_id, 0, expected_reuse,
                                                  bypass_admission),
                                ctypes.byref(handle)))
        return Completion(handle)

    def load(self, keys, engine_blocks, timeout_s=None, on_layer=None):
        """Starts copying keys[i] into engine_blocks[i]; on_layer(layer) runs, on
        a kvtier thread, as each layer lands. It takes the GIL, and the copy
        engine's thread waits for it meanwhile: keep it short (set an event).
        Returns a Completion."""
        if len(engine_blocks) != len(keys):
            raise KvtierError(INVALID_ARGUMENT, "load: one engine block per key")
        callback = _LayerFn(lambda _user, layer: on_layer(layer)) if on_layer else _LayerFn()
        handle = _P()
        _check(_lib.kvtier_load(self._rt, _keys(keys), _u32s(engine_blocks), len(keys),
                                _ns(timeout_s), callback, None, ctypes.byref(handle)))
        return Completion(handle, callback if on_layer else None)

    def request_finished(self, keys, output_tokens):
        _check(_lib.kvtier_request_finished(self._rt, _keys(keys), len(keys), output_tokens))

    def remove(self, keys):
        _check(_lib.kvtier_remove(self._rt, _keys(keys), len(keys)))

    def is_saved(self, keys):
        saved = ctypes.c_int(0)
        _check(_lib.kvtier_is_saved(self._rt, _keys(keys), len(keys), ctypes.byref(saved)))
        return bool(saved.value)

    def report_engine_usage(self, free_blocks, total_blocks):
        _check(_lib.kvtier_report_engine_usage(self._rt, free_blocks, total_blocks))

    def track_request(self, request_id, keys, engine_blocks):
        _check(_lib.kvtier_track_request(self._rt, request_id, _keys(keys), len(keys),
                                         engine_blocks))

    def untrack_request(self, request_id):
        _lib.kvtier_untrack_request(self._rt, request_id)

    def should_admit(self, blocks_needed):
        return bool(_lib.kvtier_should_admit(self._rt, blocks_needed))

    def propose_preemption(self, blocks_to_free):
        """Request ids to preempt, cheapest to restore first."""
        count = ctypes.c_size_t(0)
        capacity = 1024
        while True:
            ids = (ctypes.c_uint64 * capacity)()
            code = _lib.kvtier_propose_preemption(self._rt, blocks_to_free, ids, capacity,
                                                  ctypes.byref(count))
            if code != RESOURCE_EXHAUSTED:
                _check(code)
                return list(ids[:count.value])
            capacity = count.value  # counted as proposed already; ask again with room

    def stats(self):
        """The runtime's statistics (the admin endpoint's GET /stats) as a dict."""
        return json.loads(self._text(_lib.kvtier_stats_json))

    def metrics_text(self):
        """The statistics in the Prometheus text format (GET /metrics)."""
        return self._text(_lib.kvtier_metrics_text)

    def _text(self, fn):
        length = ctypes.c_size_t(0)
        code = fn(self._rt, None, 0, ctypes.byref(length))
        if code != RESOURCE_EXHAUSTED:
            _check(code)
        while True:
            buffer = ctypes.create_string_buffer(length.value + 1)
            code = fn(self._rt, buffer, len(buffer), ctypes.byref(length))
            if code == OK:
                return buffer.value.decode()
            if code != RESOURCE_EXHAUSTED:
                _check(code)

    def host_block_write(self, engine_block, data):
        """Host stand-in engine only: writes one block's bytes."""
        _check(_lib.kvtier_host_block_write(self._rt, engine_block, bytes(data), len(data)))

    def host_block_read(self, engine_block):
        """Host stand-in engine only: one block's bytes."""
        buffer = ctypes.create_string_buffer(self.block_bytes)
        _check(_lib.kvtier_host_block_read(self._rt, engine_block, buffer, len(buffer)))
        return buffer.raw
