"""Python values to the C arrays and structs the calls take."""

import array
import collections.abc
import ctypes
import math
import numbers
import operator

from ._lib import _KEYS, _Hints, _Key


class Keys(collections.abc.Sequence):
    """Block keys in one C array, as key_chain returns them: a sequence of
    (hi, lo) tuples that calls take without converting, and whose slices
    (step 1) share the array. Keys pickle as the list of their tuples and
    come back as Keys (to send a request's keys to another process).

    Made by the runtime's calls: the constructor takes only such an array
    (of the binding's key structs). A list of (hi, lo) tuples needs no Keys:
    pass it where keys go."""

    __slots__ = ("_array", "_start", "_len")

    def __init__(self, array, start=0, length=None):
        if not (isinstance(array, ctypes.Array) and array._type_ is _Key):
            raise TypeError("Keys wraps the C array of keys the runtime's calls return, not "
                            f"a {type(array).__name__}: pass a list of (hi, lo) tuples "
                            "where keys go as it is")
        start = operator.index(start)
        length = len(array) - start if length is None else operator.index(length)
        # C reads `length` keys from `start` on: past the array, it reads
        # whatever memory follows.
        if not (0 <= start <= len(array) and 0 <= length <= len(array) - start):
            raise ValueError(f"keys [{start}, {start + length}) are not all in an array of "
                             f"{len(array)} keys")
        self._array = array
        self._start = start
        self._len = length

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
        try:
            others = iter(other)
        except TypeError:  # not a sequence (None, an int): Python answers False
            return NotImplemented
        return list(self) == list(others)

    def __repr__(self):
        return f"Keys({list(self)!r})"

    def __reduce__(self):
        # The array's class is made on the fly and cannot be pickled by name.
        return (_keys_from_list, (list(self),))

    def _pointer(self):
        if self._len == 0:
            return None
        offset = self._start * ctypes.sizeof(_Key)
        return ctypes.cast(ctypes.byref(self._array, offset), _KEYS)


def _keys_from_list(pairs):
    """Keys holding `pairs`, (hi, lo) tuples: how pickled Keys come back."""
    return Keys(_keys(pairs))


def _uint(value, bits, what):
    """`value` as a C unsigned integer of `bits` bits. ctypes would wrap -1 or
    2**32 into another valid-looking number (a different engine block, a
    request id that is not the engine's), so anything out of range raises."""
    if not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 1 << bits:
        raise OverflowError(f"{what} is {value}; it must be in [0, 2**{bits})")
    return value


def _u32(value, what):
    return _uint(value, 32, what)


def _u64(value, what):
    return _uint(value, 64, what)


def _key(key, what):
    """One (hi, lo) pair as a checked pair of unsigned 64-bit ints."""
    if isinstance(key, numbers.Integral):
        raise TypeError("keys are a sequence of (hi, lo) keys, not one key: "
                        "pass [key] or keys[i:i+1]")
    try:
        hi, lo = key
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a (hi, lo) pair of ints, not {key!r}") from None
    return _u64(hi, f"{what}'s hi"), _u64(lo, f"{what}'s lo")


def _keys(keys):
    if isinstance(keys, Keys):
        return keys._pointer()
    try:
        # array.array range-checks each value in C, at a fraction of the cost
        # of checking them one by one here.
        flat = array.array("Q", [part for hi, lo in keys for part in (hi, lo)])
    except (TypeError, ValueError, OverflowError):
        for i, key in enumerate(keys):
            _key(key, f"key {i}")  # raises, naming the key and what is wrong
        raise
    return (_Key * len(keys)).from_buffer_copy(flat)


def _ints(values, ctype, typecodes, what, check):
    """A C array of `values`: a straight copy of an array.array or NumPy array
    of the matching 4-byte integer type, else through an array.array of
    typecodes[0] (which also range-checks each value; `check(value, name)`
    then names the first bad one, as `what`[i])."""
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None and view.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, not of shape {tuple(view.shape)}")
    if view is None or view.itemsize != 4 or view.format not in typecodes:
        # array.array would take bytes and bytearray as raw machine words:
        # four byte values would make one int.
        items = list(values) if isinstance(values, (bytes, bytearray)) else values
        try:
            view = memoryview(array.array(typecodes[0], items))
        except (TypeError, ValueError, OverflowError):
            for i, value in enumerate(values):
                check(value, f"{what}[{i}]")
            raise
    return (ctype * len(view)).from_buffer_copy(view.cast("B") if view.c_contiguous
                                                else view.tobytes())


def _key_ptr(key, what="parent"):
    """A pointer to the parent key (or the key `what` names): None, a (hi, lo)
    pair, or a sequence of exactly one such pair (keys[i:i+1] as well as keys[i])."""
    if key is None:
        return None
    if isinstance(key, numbers.Number):
        raise TypeError(f"a {what} is one key, a (hi, lo) pair, not {type(key).__name__}: "
                        "pass keys[i] or keys[i:i+1]")
    if isinstance(key, Keys) or (len(key) and not isinstance(key[0], numbers.Number)):
        if len(key) != 1:
            raise ValueError(f"a {what} is one key, not {len(key)}: pass keys[i] or keys[i:i+1]")
        key = key[0]
    if len(key) != 2:
        raise ValueError(f"a {what} is one key, a (hi, lo) pair, not {len(key)} values")
    return ctypes.pointer(_Key(*_key(key, f"the {what}")))


def _bytes(data, what):
    """The bytes of bytes-like `data`, whatever the width of its items. An int
    or str is refused: bytes(n) is n zero bytes, and a str has no one encoding."""
    if isinstance(data, (numbers.Integral, str)):
        raise TypeError(f"{what} must be bytes-like (bytes, bytearray, an array), "
                        f"not {type(data).__name__}")
    return bytes(data)


def _c_string(value, what):
    """A str (as UTF-8) or bytes-like `value` as the bytes of a C string; a NUL
    inside it is refused, as C would end the string there."""
    out = value.encode() if isinstance(value, str) else _bytes(value, what)
    nul = out.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{what} holds a NUL character at offset {nul}")
    return out


def _i32(value, what):
    if not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -(1 << 31) <= int(value) < 1 << 31:
        raise OverflowError(f"{what} is {int(value)}; it must be in [-2**31, 2**31)")
    return int(value)


def _u32s(values, what="engine_blocks"):
    return _ints(values, ctypes.c_uint32, ("I", "L", "=I", "<I"), what, _u32)


def _i32s(values, what):
    return _ints(values, ctypes.c_int32, ("i", "l", "=i", "<i"), what, _i32)


def _hints(session_id, request_id, expected_reuse, bypass_admission):
    if not (session_id or request_id or bypass_admission) and expected_reuse is None:
        return None
    h = _Hints(_u64(session_id, "session_id"), _u64(request_id, "request_id"), 0.0, 0,
               int(bool(bypass_admission)))
    if expected_reuse is not None:
        if not isinstance(expected_reuse, numbers.Real):
            raise TypeError("expected_reuse must be a number (expected later uses), not "
                            f"{type(expected_reuse).__name__}")
        h.expected_reuse = expected_reuse
        h.has_expected_reuse = 1
    return ctypes.byref(h)


def _ns(timeout_s):
    """Nanoseconds for the C API, where a negative value means no limit: a
    deadline already past is 0 (at once), and one too far to count (infinity
    included) is the largest there is, never a wrapped or negative number."""
    if timeout_s is None:
        return -1
    if not isinstance(timeout_s, numbers.Real):
        raise TypeError(f"a timeout is seconds or None, not {type(timeout_s).__name__}")
    seconds = float(timeout_s)
    if math.isnan(seconds):
        raise ValueError("a timeout is seconds or None, not NaN")
    if seconds <= 0:
        return 0  # -inf included
    if seconds >= (2**63 - 1) / 1e9:
        return 2**63 - 1
    return int(seconds * 1e9)


def _callable(fn, what):
    """`fn`, refused at the call if it cannot be called: later, on a kvtier
    thread, the TypeError would only be printed and the work go on."""
    if not callable(fn):
        raise TypeError(f"{what} must be callable, not {type(fn).__name__}")
    return fn
