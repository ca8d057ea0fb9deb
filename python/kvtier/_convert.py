"""Python values to the C arrays and structs the calls take."""

import array
import ctypes
import numbers

from ._lib import _KEYS, _Hints, _Key


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
        try:
            others = iter(other)
        except TypeError:  # not a sequence (None, an int): Python answers False
            return NotImplemented
        return list(self) == list(others)

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
    for i, key in enumerate(keys):
        if isinstance(key, numbers.Integral):
            raise TypeError("keys are a sequence of (hi, lo) keys, not one key: "
                            "pass [key] or keys[i:i+1]")
        array[i].hi, array[i].lo = key
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
    """A pointer to the parent key: None, a (hi, lo) pair, or a sequence of
    exactly one such pair (keys[i:i+1] as well as keys[i])."""
    if key is None:
        return None
    if isinstance(key, Keys) or (len(key) and not isinstance(key[0], numbers.Integral)):
        if len(key) != 1:
            raise ValueError(f"a parent is one key, not {len(key)}: pass keys[i] or keys[i:i+1]")
        key = key[0]
    if len(key) != 2:
        raise ValueError(f"a parent is one key, a (hi, lo) pair, not {len(key)} values")
    return ctypes.pointer(_Key(key[0], key[1]))


def _bytes(data, what):
    """The bytes of bytes-like `data`, whatever the width of its items. An int
    or str is refused: bytes(n) is n zero bytes, and a str has no one encoding."""
    if isinstance(data, (numbers.Integral, str)):
        raise TypeError(f"{what} must be bytes-like (bytes, bytearray, an array), "
                        f"not {type(data).__name__}")
    return bytes(data)


def _c_string(value, what):
    """A str (as UTF-8) or bytes-like `value` as the bytes of a C string."""
    return value.encode() if isinstance(value, str) else _bytes(value, what)


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
    """Nanoseconds for the C API, where a negative value means no limit: a
    deadline already past is 0 (at once), and one too far to count is the
    largest there is, never a wrapped or negative number."""
    if timeout_s is None:
        return -1
    return min(max(int(timeout_s * 1e9), 0), 2**63 - 1)
