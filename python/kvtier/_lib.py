"""The C library behind the binding: its types, the signatures of its calls,
loading it, and turning its codes into exceptions."""

import ctypes
import ctypes.util
import os
import threading
import weakref

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
    "kvtier_state_blocks": (ctypes.c_uint32, [_P]),
    "kvtier_key_chain": (ctypes.c_int, [_P, _KEYS, ctypes.POINTER(ctypes.c_int32),
                                        ctypes.c_size_t, _KEYS, ctypes.c_size_t, _SIZE_P]),
    "kvtier_key_chain_extra": (ctypes.c_int, [_P, _KEYS, ctypes.POINTER(ctypes.c_int32),
                                              ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                              _KEYS, ctypes.c_size_t, _SIZE_P]),
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
    "kvtier_layer_failed": (ctypes.c_int, [ctypes.c_char_p]),
    "kvtier_save_state": (ctypes.c_int, [_P, _KEYS, _U32S, ctypes.c_size_t,
                                         ctypes.POINTER(_Hints), ctypes.POINTER(_P)]),
    "kvtier_load_state": (ctypes.c_int, [_P, _KEYS, _U32S, ctypes.c_size_t, ctypes.c_int64,
                                         ctypes.POINTER(_P)]),
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
_lib_path = None  # the path _lib was loaded from


def lib():
    """The loaded library (loading it from the default places if needed)."""
    return _lib if _lib is not None else load_library()


def loaded():
    """Whether a library is loaded: finalizers at interpreter exit check it."""
    return _lib is not None


def _foreign_thread():
    """Whether this thread is one Python did not start: a kvtier thread
    running a callback (on_layer, done, log), which must not block."""
    return isinstance(threading.current_thread(), threading._DummyThread)


class _Calls:
    """The C calls in flight on one handle. ctypes lets go of the GIL during a
    call, so another thread may end the handle meanwhile: ending waits for
    them, as the C API asks, rather than freeing the handle under them."""

    __slots__ = ("lock", "idle", "threads", "deferred", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.idle = None  # a Condition on lock, made by the first end that waits
        self.threads = []  # an _InFlight per call in flight
        self.deferred = None  # a handle the last call in flight is to end
        _every_calls.add(self)


class _InFlight:
    """One call in flight, and its thread. Compared by identity: a thread
    may have several calls in flight on one handle (one inside a callback
    of another), and leaving one must never take another's entry."""

    __slots__ = ("thread", "deferred")

    def __init__(self, thread):
        self.thread = thread
        self.deferred = None  # the handle this call, the last out, is to end


# A child made by fork() has none of the threads whose calls were in flight
# (nor any that held a lock) but the forking one: it starts with that one's
# calls alone, or ending would wait forever.
_every_calls = weakref.WeakSet()


def _forget_calls_in_child():
    # The forking thread lives on in the child, inside its calls (a fork in a
    # callback): those stay counted, or their return would find no entry.
    me = threading.get_ident()
    for calls in list(_every_calls):
        calls.lock = threading.Lock()
        calls.idle = None
        calls.threads = [t for t in calls.threads if t.thread == me]
        if not calls.threads:
            calls.deferred = None  # a parent's handle: the child leaves it be


os.register_at_fork(after_in_child=_forget_calls_in_child)


class _Scoped:
    """A handle that ends (self._end()) at the end of a `with` or when collected.
    A subclass names the attribute holding it (_HANDLE), what a call says once
    it has ended (_ENDED), and how to end it (_end_handle(handle)).

    Thread safety: any thread may call, and end, at any time. Each C call on
    the handle goes through _call and counts as in flight until it returns;
    ending refuses new calls at once, then waits for those in flight on other
    threads before ending the handle. Where it cannot wait (a finalizer, a
    callback on a kvtier thread, or a thread with a call of its own in flight
    on this handle, such as a callback run inside it) it returns at once, and
    the last call in flight to return ends the handle."""

    _HANDLE = "_handle"
    _ENDED = "handle is freed"

    def __init__(self, handle=None):
        self._calls = _Calls()
        setattr(self, self._HANDLE, handle)

    def _call(self, fn, *args):
        """fn(handle, *args), counted in flight; once ended, raises
        KvtierError(INVALID_ARGUMENT, _ENDED) rather than passing NULL on
        (whose calls answer 0, False or "is NULL")."""
        calls = self._calls
        me = _InFlight(threading.get_ident())
        # Registered inside the try, so that an exception raised by a signal
        # handler (Ctrl-C) at any point after it cannot leave the call counted
        # in flight for good: ending would then wait, or be deferred, forever.
        entered = False
        try:
            with calls.lock:
                handle = getattr(self, self._HANDLE)
                if not handle:
                    raise KvtierError(INVALID_ARGUMENT, self._ENDED)
                entered = True
                calls.threads.append(me)
            return fn(handle, *args)
        finally:
            if entered:
                self._leave_surely(me)

    def _leave_surely(self, me):
        """_leave(me), run again when an exception (Ctrl-C) cuts it short,
        until it has run whole; the first such exception is raised after."""
        interrupted = None
        while True:
            try:
                self._leave(me)
                break
            except BaseException as e:  # noqa: B036 - re-raised below
                interrupted = interrupted or e
        # Ended once, outside the retries: a handle handed to `me` stays
        # there until then, however the leaving was cut short.
        handle, me.deferred = me.deferred, None
        try:
            if handle:
                self._end_handle(handle)
        finally:
            if interrupted is not None:
                raise interrupted

    def _leave(self, me):
        """Takes `me` out of flight; the last call out takes over a handle
        ended meanwhile (me.deferred). Each step can run again."""
        calls = self._calls
        with calls.lock:
            if me in calls.threads:  # absent if interrupted before the append, or left already
                calls.threads.remove(me)
            if not calls.threads:
                if calls.deferred:
                    me.deferred = calls.deferred
                    calls.deferred = None
                if calls.idle is not None:
                    calls.idle.notify_all()

    def _end(self, wait=True):
        """Ends the handle once (again, or from a second thread: returns at
        once); see the class comment for when it waits."""
        calls = self._calls
        handle = None
        try:
            with calls.lock:
                handle = getattr(self, self._HANDLE, None)
                setattr(self, self._HANDLE, None)
                if not handle or not calls.threads:
                    return  # a handle no call is in on ends below
                # Waiting for its own call would never end; on a kvtier thread
                # a call may be waiting for it (wait() returns after the done
                # callbacks).
                me = threading.get_ident()
                if (not wait or any(t.thread == me for t in calls.threads)
                        or _foreign_thread()):
                    calls.deferred, handle = handle, None
                    return
                if calls.idle is None:
                    calls.idle = threading.Condition(calls.lock)
                try:
                    while calls.threads:
                        calls.idle.wait()
                except BaseException:  # interrupted (Ctrl-C): left to the last call
                    if calls.threads:
                        calls.deferred, handle = handle, None
                    raise
        finally:
            if handle:  # outside the lock: ending may call back into Python
                self._end_handle(handle)

    def _end_handle(self, handle):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._end()

    def __del__(self):
        # Never waits: no call is in flight while nothing holds the object.
        if loaded() and hasattr(self, "_calls"):
            self._end(wait=False)


def _installed_library():
    """The library beside an installed copy of this package, which `cmake
    --install` puts in <libdir>/kvtier/python/kvtier, three levels below it."""
    here = os.path.dirname(os.path.abspath(__file__))  # .../kvtier/python/kvtier
    python_dir = os.path.dirname(here)
    if (os.path.basename(here) != "kvtier" or os.path.basename(python_dir) != "python"
            or os.path.basename(os.path.dirname(python_dir)) != "kvtier"):
        return None
    libdir = os.path.dirname(os.path.dirname(python_dir))
    try:
        names = sorted(n for n in os.listdir(libdir) if n.startswith("libkvtier.so"))
    except OSError:
        return None
    return os.path.join(libdir, names[0]) if names else None


def _same_library(path, loaded_path):
    if path == loaded_path:
        return True
    try:
        return os.path.samefile(path, loaded_path)
    except OSError:  # a name the loader searched for, or a file since gone
        return False


def load_library(path=None):
    """Loads libkvtier once: `path`, else $KVTIER_LIBRARY, else the one installed
    beside this module, else the system's. Once one is loaded, a `path` naming
    another raises OSError: a process uses one (a runtime would silently open
    in the one loaded first)."""
    global _lib, _lib_path
    if _lib is not None:
        if path is not None and not _same_library(os.fspath(path), _lib_path):
            raise OSError(f"libkvtier is loaded from {_lib_path} already; {os.fspath(path)} "
                          "cannot be loaded too (one per process)")
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
    _lib, _lib_path = lib, os.fspath(path)
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


def code_name(code):
    return load_library().kvtier_code_name(code).decode()


def _check(code):
    if code != OK:
        raise KvtierError(code, lib().kvtier_last_error().decode())
