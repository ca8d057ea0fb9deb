"""Handles the runtime returns: the outcome of a save or load, and a pin."""

import asyncio
import ctypes

import itertools
import threading

from ._convert import _callable, _ns
from ._lib import (DEADLINE_EXCEEDED, OK, UNAVAILABLE, KvtierError, _DoneFn, _Scoped, _check,
                   lib)

# Callbacks of completions freed before their work ended, by a key passed to
# kvtier as the done callback's `user`: kept until that callback drops them.
_orphans = {}
_orphans_lock = threading.Lock()
_orphan_keys = itertools.count(1)


def _drop_orphan(user):
    with _orphans_lock:
        dropped = _orphans.pop(user, None)
    # Released outside the lock: a callback may hold the last reference to a
    # completion whose end takes the lock too.
    del dropped


# The load whose on_layer this thread is running (`load`), if any: a wait
# for that load there would wait for the callback it is in.
_in_layer = threading.local()

# Lives as long as the module: it is the one callback never freed while it
# runs (the callbacks it drops have all returned by then).
_DROP_ORPHAN = _DoneFn(_drop_orphan)


class Completion(_Scoped):
    """The outcome of one save or load, one result per block (freed at the end
    of a `with`, or when collected). Once freed, its calls raise KvtierError."""

    _ENDED = "completion is freed"

    def __init__(self, handle, keepalive=None, load=None, blocks=0):
        super().__init__(handle)
        # Blocks the call was asked for: a call refused before C could list
        # them (out of memory) has none, and answers each with its refusal.
        self._blocks = blocks
        # Callbacks kvtier may still call: kept alive until the work is done.
        self._keepalive = [keepalive] if keepalive is not None else []
        self._load = load  # what on_layer marks its thread with (_in_layer)

    def wait(self, timeout_s=None):
        """Waits (at most timeout_s; None: no limit) and returns the call's
        code once every block has its result: OK, or the first block's
        failure. None if it is still running at timeout_s (the work goes on):
        a block's own failure may be DEADLINE_EXCEEDED (a load's timeout_s),
        so that code does not mean "not done", and a poll loop is
        `while c.wait(0.01) is None: ...`. UNAVAILABLE in a process forked
        while the work ran, which no thread there will finish."""
        ns = _ns(timeout_s)
        if ns < 0 or ns == 2**63 - 1:  # no limit, or one C waits out like none
            self._refuse_own_layer("wait() without a limit")
        code = self._call(lib().kvtier_completion_wait, ns)
        # C answers DEADLINE_EXCEEDED both at the timeout and for work that
        # ended so; whether it is done tells which. Done by now, it may have
        # ended since the timeout: the code is asked for again, at once.
        if code != DEADLINE_EXCEEDED or ns < 0:
            return code
        return self._call(lib().kvtier_completion_wait, 0) if self.done else None

    def _refuse_own_layer(self, what):
        if self._load is not None and getattr(_in_layer, "load", None) is self._load:
            raise RuntimeError(f"{what} in a load's own on_layer would never return: the load "
                               "ends after on_layer returns (add_done_callback runs once it has)")

    @property
    def done(self):
        return bool(self._call(lib().kvtier_completion_done))

    @property
    def layers_done(self):
        return self._call(lib().kvtier_completion_layers_done)

    def results(self):
        """[(code, bytes)] per block; waits for the completion first. In a
        process forked while it ran, raises KvtierError (UNAVAILABLE)."""
        return [(code, nbytes) for code, nbytes, _ in self._results()]

    def errors(self):
        """Per block, None where it succeeded, else a KvtierError with its code
        and why (e.g. "engine block 99 is out of range"); waits first."""
        return [None if code == OK else KvtierError(code, message)
                for code, _, message in self._results()]

    def _results(self):
        self._refuse_own_layer("results() or errors()")
        code = self.wait()
        if not self.done:
            # A wait without a limit returns before the end only in a process
            # forked while the work ran: C would answer each block "not done".
            raise KvtierError(code, lib().kvtier_last_error().decode(errors="replace"))
        out = []
        size = self._call(lib().kvtier_completion_size)
        for i in range(size if size != 0 or code == OK else self._blocks):
            nbytes = ctypes.c_uint64(0)
            code = self._call(lib().kvtier_completion_result, i, ctypes.byref(nbytes))
            # The block's own message: the C call leaves it as this thread's
            # last error.
            message = lib().kvtier_last_error().decode(errors="replace") if code != OK else ""
            out.append((code, nbytes.value, message))
        return out

    def add_done_callback(self, fn):
        """Calls fn() once the results are final, on a kvtier thread (or here, if
        they are already). fn may read this completion (results(), errors(),
        wait() answer at once there). It takes the GIL: keep it short, e.g.
        wake a loop."""
        _callable(fn, "a done callback")
        callback = _DoneFn(lambda _user: fn())
        self._keepalive.append(callback)
        _check(self._call(lib().kvtier_completion_on_done, callback, None))

    async def wait_async(self):
        """Awaits the completion without blocking the event loop; returns wait()'s code."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def wake():
            try:
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))
            except RuntimeError:
                # A wait_async cancelled (wait_for's timeout, a task cancelled
                # at shutdown) whose work ends after its loop closed: nothing
                # is left to wake.
                if not loop.is_closed():
                    raise

        self.add_done_callback(wake)
        await done
        return self.wait()

    def free(self):
        """Frees the handle, not the work, which it never waits for: callbacks
        still to run are kept alive until the work ends. Calls on the handle
        in flight on other threads return first: free waits for them, a
        wait() with no limit included. Called inside a call of this thread's
        own on it (from a done callback add_done_callback runs at once) or on
        a kvtier thread (from a callback), it returns at once, and the handle
        is freed once its calls in flight have returned."""
        self._end()

    def _end_handle(self, handle):
        if self._keepalive:
            key = next(_orphan_keys)
            with _orphans_lock:
                _orphans[key] = self._keepalive
            # Runs after every callback registered before it, or at once if
            # the work has ended.
            code = lib().kvtier_completion_on_done(handle, _DROP_ORPHAN, key)
            # A runtime left behind by fork(): nothing here calls them. Any
            # other failure (no memory to register the drop) keeps them for
            # good: the work may still call them.
            if code == UNAVAILABLE:
                _drop_orphan(key)
            self._keepalive = []
        lib().kvtier_completion_free(handle)


class Pin(_Scoped):
    """Hits a lookup keeps in the hub until release() (or the end of a `with`)."""

    def __init__(self, handle, hit_blocks, tiers):
        super().__init__(handle)
        self.hit_blocks = hit_blocks
        self.tiers = tiers

    def release(self):
        self._end()

    def _end_handle(self, handle):
        lib().kvtier_unpin(handle)
