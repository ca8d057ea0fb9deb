"""The runtime: one model's kvtier, opened from its YAML configuration."""

import atexit
import ctypes
import json
import os
import threading
import weakref

from ._convert import (Keys, _bytes, _c_string, _callable, _hints, _i32s, _key_ptr, _keys, _ns,
                       _u32, _u32s, _u64, _uint)
from ._lib import (INVALID_ARGUMENT, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARNING, OK,
                   RESOURCE_EXHAUSTED, KvtierError, _CudaCache, _Key, _LayerFn, _LogFn, _P,
                   _check, _foreign_thread, _Scoped, lib, load_library)
from .completion import Completion, Pin, _in_layer


def logging_sink(logger):
    """A `log` for Runtime that writes to a logging.Logger at the matching level."""
    levels = {LOG_DEBUG: 10, LOG_INFO: 20, LOG_WARNING: 30, LOG_ERROR: 40}
    return lambda level, message: logger.log(levels.get(level, 40), "%s", message)


# Every runtime not yet closed, closed at interpreter exit (atexit): a kvtier
# thread whose callback (on_layer, done, log) asks for the GIL once Python has
# begun to finalize is ended mid-call, which aborts the process. Closing
# first runs every callback still due while Python can still take them.
_open_runtimes = weakref.WeakSet()


@atexit.register
def _close_open_runtimes():
    for rt in list(_open_runtimes):
        try:
            rt.close()
        except BaseException:  # one that cannot close (Ctrl-C) must not keep the rest open
            pass


def _layer_callback(on_layer, load):
    """on_layer as a C callback. What it raises would only be printed by
    ctypes, and the load would report its blocks OK: kvtier is told instead,
    so they end INTERNAL ("on_layer failed: ...") and no later layer is
    reported, as for a C++ on_layer that throws. While it runs, the thread
    is marked as inside `load`'s on_layer, where a wait for that load would
    wait for itself."""
    def call(_user, layer):
        outer = getattr(_in_layer, "load", None)
        _in_layer.load = load
        try:
            on_layer(layer)
        except BaseException as e:  # nothing may pass back into C
            why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            lib().kvtier_layer_failed(why.encode(errors="replace"))
        finally:
            _in_layer.load = outer
    return _LayerFn(call)


class Runtime(_Scoped):
    """A kvtier runtime for one model, opened from one YAML configuration.

    config_path (a str, bytes or os.PathLike) or config_text (a str or bytes),
    exactly one, and `overrides` ("path=value" strings, or one such str or
    bytes) give the config. Without cuda_tensors the runtime copies to and
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

    _HANDLE = "_rt"
    _ENDED = "runtime is closed"

    def __init__(self, config_path=None, config_text=None, overrides=(), cuda_tensors=None,
                 cuda_num_blocks=0, cuda_device=0, cuda_stream=None, cuda_shape=None,
                 log=None, library=None):
        super().__init__()  # closed, until kvtier_open succeeds
        # Ids tracked through this object: propose_preemption sizes its
        # buffer by them, since a call that did not fit counts its victims
        # as proposed all the same.
        self._tracked = set()
        # log(level, message) gets the runtime's lines at LOG_INFO and up, on its
        # threads (logging_sink(logger) routes them to logging); None: stderr.
        self._log = (_LogFn(lambda _user, level, message:
                            log(level, message.decode(errors="replace")))
                     if log is not None else _LogFn())
        if log is not None:
            _callable(log, "log")
        clib = load_library(library)
        if overrides is None:
            overrides = ()
        elif isinstance(overrides, (str, bytes)):
            overrides = [overrides]  # one override, not one per character
        sets = [_c_string(s, "an override") for s in overrides]
        c_sets = (ctypes.c_char_p * len(sets))(*sets) if sets else None
        cuda = None
        if cuda_tensors is not None:
            # Addresses are checked like every other integer: ctypes would
            # pass -1 on as 2**64 - 1, and device 2**32 as device 0.
            bits = 8 * ctypes.sizeof(ctypes.c_void_p)
            ptrs = (ctypes.c_void_p * len(cuda_tensors))(
                *(_uint(p, bits, f"cuda_tensors[{i}]") for i, p in enumerate(cuda_tensors)))
            stream = None if cuda_stream is None else _uint(cuda_stream, bits, "cuda_stream")
            shape = ((ctypes.c_uint64 * len(cuda_shape))(*(_u64(d, "a cuda_shape dimension")
                                                          for d in cuda_shape))
                     if cuda_shape else None)
            cuda = ctypes.pointer(_CudaCache(ptrs, len(cuda_tensors),
                                             _u32(cuda_num_blocks, "cuda_num_blocks"),
                                             _uint(cuda_device, 31, "cuda_device"), stream,
                                             shape, len(cuda_shape) if cuda_shape else 0))
        handle = _P()
        _check(clib.kvtier_open(_c_string(os.fsencode(config_path), "config_path")
                               if config_path is not None else None,
                               _c_string(config_text, "config_text")
                               if config_text is not None else None,
                               c_sets, len(sets), cuda, self._log, None,
                               ctypes.byref(handle)))
        self._rt = handle
        _open_runtimes.add(self)

    def close(self):
        """Closes the runtime (again: nothing); every other call then raises
        KvtierError "runtime is closed". Calls in flight on other threads
        return first: close waits for them. Called inside a call of this
        thread's own on the runtime (from a log callback) or on a kvtier
        thread (from a callback), it returns at once, and the runtime closes
        once its calls in flight have returned."""
        self._end()

    def _end_handle(self, handle):
        # A runtime may end on one of its own threads: close() in an on_layer,
        # done or log callback, or the cyclic collector ending a runtime in a
        # reference cycle (an engine object holding it and its own bound
        # method as `log`) on whichever thread collects. kvtier_close there
        # would join the thread it runs on. From a thread Python did not
        # start, it closes from a new thread, keeping the log callback alive
        # until then.
        if not _foreign_thread():
            lib().kvtier_close(handle)
            return
        log = self._log
        # The thread's target holds `log` until kvtier_close has returned.
        threading.Thread(target=lambda: (lib().kvtier_close(handle), log),
                         name="kvtier-close").start()

    @property
    def namespace(self):
        return self._call(lib().kvtier_namespace)

    @property
    def block_bytes(self):
        return self._call(lib().kvtier_block_bytes)

    @property
    def block_tokens(self):
        return self._call(lib().kvtier_block_tokens)

    @property
    def engine_blocks(self):
        """Pages of the engine's pool: engine block ids are below this."""
        return self._call(lib().kvtier_engine_blocks)

    @property
    def state_blocks(self):
        """Pages one state checkpoint takes (runtime.state_blocks); 0: KV only."""
        return self._call(lib().kvtier_state_blocks)

    def key_chain(self, tokens, parent=None, extra=None):
        """Keys of the full blocks of `tokens` (a list, or faster an array.array('i')
        or an int32 NumPy array), continuing `parent` (None: first block), as Keys.
        `extra` (bytes-like) is mixed into every key: whatever besides the tokens
        changes the KV, such as a LoRA adapter's id or a tenant's cache salt."""
        c_tokens = _i32s(tokens, "tokens")
        salt = b"" if extra is None else _bytes(extra, "extra")
        n = len(c_tokens) // self.block_tokens
        out = (_Key * n)()
        count = ctypes.c_size_t(0)
        _check(self._call(lib().kvtier_key_chain_extra, _key_ptr(parent), c_tokens,
                          len(c_tokens), salt, len(salt), out if n else None, n,
                          ctypes.byref(count)))
        return Keys(out, 0, count.value)

    def key_from_engine_hash(self, engine_hash, parent=None):
        # Its bytes: len() of an array of wider items counts items.
        data = _bytes(engine_hash, "an engine hash")
        out = _Key()
        _check(self._call(lib().kvtier_key_from_engine_hash, _key_ptr(parent), data, len(data),
                          ctypes.byref(out)))
        return (out.hi, out.lo)

    def keys_from_engine_hashes(self, hashes, parent=None):
        """Keys of consecutive blocks named by the engine's block hashes (bytes
        objects of one length), continuing `parent`, in one call, as Keys."""
        hashes = [_bytes(h, "each engine hash") for h in hashes]
        size = len(hashes[0]) if hashes else 0
        if any(len(h) != size for h in hashes):
            raise KvtierError(INVALID_ARGUMENT,
                              "invalid_argument: engine hashes must all have one length")
        out = (_Key * len(hashes))()
        _check(self._call(lib().kvtier_keys_from_engine_hashes, _key_ptr(parent),
                          b"".join(hashes), size, len(hashes), out if hashes else None))
        return Keys(out)

    def _start(self, own, fn, *args):
        """fn(handle, *args, &out) for a call that hands back a handle `out`:
        returns own(out), the object that frees it and keeps what the call
        uses (an on_layer) alive until it ends. Should an exception (Ctrl-C)
        come once the C call has issued it, `out` still goes to its owner,
        whose collection then frees it, before the exception goes on."""
        handle = _P()
        try:
            _check(self._call(fn, *args, ctypes.byref(handle)))
        except BaseException:  # noqa: B036 - re-raised
            if handle.value:
                own(handle)
            raise
        return own(handle)

    def lookup(self, keys, session_id=0, request_id=0, expected_reuse=None):
        """(leading keys stored, [tier index of each hit, 0 = host hub])."""
        hits = ctypes.c_size_t(0)
        tiers = ctypes.create_string_buffer(len(keys))
        _check(self._call(lib().kvtier_lookup, _keys(keys), len(keys),
                          _hints(session_id, request_id, expected_reuse, False),
                          ctypes.byref(hits), tiers))
        return hits.value, list(tiers.raw[:hits.value])

    def lookup_and_pin(self, keys, session_id=0, request_id=0, expected_reuse=None):
        """As lookup, and keeps the hits from being evicted until the returned
        Pin is released: look a request up when it is scheduled, load it later."""
        hits = ctypes.c_size_t(0)
        tiers = ctypes.create_string_buffer(len(keys))
        return self._start(lambda handle: Pin(handle, hits.value, list(tiers.raw[:hits.value])),
                           lib().kvtier_lookup_and_pin, _keys(keys), len(keys),
                           _hints(session_id, request_id, expected_reuse, False),
                           ctypes.byref(hits), tiers)

    def save(self, keys, engine_blocks, parent=None, session_id=0, expected_reuse=None,
             bypass_admission=False):
        """Starts copying engine_blocks[i] in as keys[i]; returns a Completion."""
        if len(engine_blocks) != len(keys):
            raise KvtierError(INVALID_ARGUMENT, "invalid_argument: save: one engine block per key")
        return self._start(lambda handle: Completion(handle, blocks=len(keys)),
                           lib().kvtier_save, _key_ptr(parent), _keys(keys), _u32s(engine_blocks),
                           len(keys), _hints(session_id, 0, expected_reuse, bypass_admission))

    def load(self, keys, engine_blocks, timeout_s=None, on_layer=None):
        """Starts copying keys[i] into engine_blocks[i]; on_layer(layer) runs, on
        a kvtier thread, as each layer lands. It takes the GIL, and the copy
        engine's thread waits for it meanwhile: keep it short (set an event).
        It must not wait for this load, which ends only after it returns:
        results(), errors() and wait() without a limit raise RuntimeError
        there. Nor may it wait for another save or load, which may need the
        thread it holds. If it raises, it is not called again and the copied
        blocks end INTERNAL ("on_layer failed: <exception>"). Returns a
        Completion."""
        if len(engine_blocks) != len(keys):
            raise KvtierError(INVALID_ARGUMENT, "invalid_argument: load: one engine block per key")
        if on_layer is not None:
            _callable(on_layer, "on_layer")
        load = object()  # names this load to its on_layer before its Completion exists
        callback = _layer_callback(on_layer, load) if on_layer is not None else _LayerFn()
        return self._start(lambda handle: Completion(handle, callback if on_layer is not None
                                                     else None, load, blocks=len(keys)),
                           lib().kvtier_load, _keys(keys), _u32s(engine_blocks), len(keys),
                           _ns(timeout_s), callback, None)

    def save_state(self, boundary, engine_blocks, session_id=0, expected_reuse=None,
                   bypass_admission=False):
        """Hybrid models (runtime.state_blocks > 0): starts copying the engine
        blocks holding the recurrent state at the end of the stored block
        `boundary` in as its state checkpoint; lookups then answer only
        prefixes whose last block has one. Returns a Completion."""
        return self._start(lambda handle: Completion(handle, blocks=len(engine_blocks)),
                           lib().kvtier_save_state, _key_ptr(boundary, "boundary"),
                           _u32s(engine_blocks), len(engine_blocks),
                           _hints(session_id, 0, expected_reuse, bypass_admission))

    def load_state(self, boundary, engine_blocks, timeout_s=None):
        """Starts copying the state checkpoint of `boundary` into engine_blocks;
        returns a Completion (NOT_FOUND per block when none is stored)."""
        return self._start(lambda handle: Completion(handle, blocks=len(engine_blocks)),
                           lib().kvtier_load_state, _key_ptr(boundary, "boundary"),
                           _u32s(engine_blocks), len(engine_blocks), _ns(timeout_s))

    def request_finished(self, keys, output_tokens):
        _check(self._call(lib().kvtier_request_finished, _keys(keys), len(keys),
                          _u32(output_tokens, "output_tokens")))

    def remove(self, keys):
        _check(self._call(lib().kvtier_remove, _keys(keys), len(keys)))

    def is_saved(self, keys):
        saved = ctypes.c_int(0)
        _check(self._call(lib().kvtier_is_saved, _keys(keys), len(keys), ctypes.byref(saved)))
        return bool(saved.value)

    def report_engine_usage(self, free_blocks, total_blocks):
        _check(self._call(lib().kvtier_report_engine_usage, _u32(free_blocks, "free_blocks"),
                          _u32(total_blocks, "total_blocks")))

    def track_request(self, request_id, keys, engine_blocks):
        request_id = _u64(request_id, "request_id")
        _check(self._call(lib().kvtier_track_request, request_id,
                          _keys(keys), len(keys), _u32(engine_blocks, "engine_blocks")))
        self._tracked.add(request_id)

    def untrack_request(self, request_id):
        request_id = _u64(request_id, "request_id")
        self._call(lib().kvtier_untrack_request, request_id)
        self._tracked.discard(request_id)

    def should_admit(self, blocks_needed):
        return bool(self._call(lib().kvtier_should_admit, _u32(blocks_needed, "blocks_needed")))

    def propose_preemption(self, blocks_to_free):
        """Request ids to preempt, cheapest to restore first."""
        blocks_to_free = _u32(blocks_to_free, "blocks_to_free")
        count = ctypes.c_size_t(0)
        # Room for every tracked request, so that the call fits and counts
        # each victim once (a request tracked meanwhile on another thread
        # can still make it ask again).
        capacity = max(64, len(self._tracked))
        while True:
            ids = (ctypes.c_uint64 * capacity)()
            code = self._call(lib().kvtier_propose_preemption, blocks_to_free, ids, capacity,
                              ctypes.byref(count))
            if code != RESOURCE_EXHAUSTED:
                _check(code)
                return list(ids[:count.value])
            capacity = count.value  # counted as proposed already; ask again with room

    def stats(self):
        """The runtime's statistics (the admin endpoint's GET /stats) as a dict."""
        return json.loads(self._text(lib().kvtier_stats_json))

    def metrics_text(self):
        """The statistics in the Prometheus text format (GET /metrics)."""
        return self._text(lib().kvtier_metrics_text)

    def _text(self, fn):
        # Each call renders the statistics anew: a buffer that usually fits
        # saves asking for the size first; a larger text is asked for again.
        length = ctypes.c_size_t(64 << 10)
        while True:
            buffer = ctypes.create_string_buffer(length.value + 1)
            code = self._call(fn, buffer, len(buffer), ctypes.byref(length))
            if code == OK:
                return buffer.value.decode()
            if code != RESOURCE_EXHAUSTED:
                _check(code)

    def host_block_write(self, engine_block, data):
        """Host stand-in engine only: writes one block's bytes."""
        data = _bytes(data, "a block's data")
        _check(self._call(lib().kvtier_host_block_write, _u32(engine_block, "engine_block"), data,
                          len(data)))

    def host_block_read(self, engine_block):
        """Host stand-in engine only: one block's bytes."""
        engine_block = _u32(engine_block, "engine_block")
        buffer = ctypes.create_string_buffer(self.block_bytes)
        _check(self._call(lib().kvtier_host_block_read, engine_block, buffer, len(buffer)))
        return buffer.raw
