"""The Python binding's arguments: every value that does not fit its C type is
refused by name before the call, never wrapped into another valid-looking
one; callbacks are checked when given; a script may end with callbacks still
due. Run by ctest like test_kvtier.py."""

import array
import math
import os
import subprocess
import sys
import tempfile
import unittest

import kvtier
from test_kvtier import CONFIG, pattern


def run_script(script):
    """Runs `script` in a fresh interpreter that imports these tests' modules
    (a hang or an abort there fails one test, not the suite)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)


class ArgumentTest(unittest.TestCase):
    def assert_script_prints(self, script, expected):
        run = run_script(script)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertEqual(run.stdout, expected)

    def setUp(self):
        self.rt = kvtier.Runtime(config_text=CONFIG)
        self.keys = self.rt.key_chain(list(range(64)))

    def tearDown(self):
        self.rt.close()

    def test_an_engine_block_out_of_range_is_refused_not_wrapped(self):
        self.rt.host_block_write(0, pattern(8192, 1))
        # ctypes passed 2**32 on as block 0, overwriting it.
        for block in (2**32, -1, 2**32 + 15):
            with self.subTest(block=block):
                with self.assertRaises(OverflowError) as e:
                    self.rt.host_block_write(block, pattern(8192, 2))
                self.assertIn("engine_block is", str(e.exception))
                with self.assertRaises(OverflowError):
                    self.rt.host_block_read(block)
        self.assertEqual(self.rt.host_block_read(0), pattern(8192, 1))
        with self.assertRaises(TypeError) as e:
            self.rt.host_block_read("0")
        self.assertIn("engine_block must be an int, not str", str(e.exception))

    def test_a_buffer_of_more_than_one_dimension_is_refused_by_name(self):
        grid = memoryview(array.array("I", [0, 1, 2, 3])).cast("B").cast("I", shape=[2, 2])
        with self.assertRaises(ValueError) as e:
            self.rt.save(self.keys[:2], grid)
        self.assertIn("must be one-dimensional, not of shape (2, 2)", str(e.exception))

    def test_a_nul_inside_a_string_is_refused_not_cut_off(self):
        # C would end the string at the NUL and read only what comes before.
        with self.assertRaises(ValueError) as e:
            kvtier.Runtime(config_text=CONFIG, overrides=["model.block_tokens=32\0garbage"])
        self.assertIn("an override holds a NUL character at offset 21", str(e.exception))
        with self.assertRaises(ValueError) as e:
            kvtier.Runtime(config_text=CONFIG + "\0garbage: [")
        self.assertIn("config_text holds a NUL character", str(e.exception))
        with self.assertRaises(ValueError) as e:
            kvtier.Runtime(config_path="/etc/kvtier.yaml\0.bak")
        self.assertIn("config_path holds a NUL character at offset 16", str(e.exception))

    def test_counts_and_ids_out_of_range_are_refused(self):
        calls = {  # name: (bits, call)
            "free_blocks": (32, lambda v: self.rt.report_engine_usage(v, 16)),
            "total_blocks": (32, lambda v: self.rt.report_engine_usage(1, v)),
            "blocks_needed": (32, self.rt.should_admit),
            "blocks_to_free": (32, self.rt.propose_preemption),
            "output_tokens": (32, lambda v: self.rt.request_finished(self.keys, v)),
            "engine_blocks": (32, lambda v: self.rt.track_request(1, self.keys, v)),
            "request_id": (64, lambda v: self.rt.track_request(v, self.keys, 4)),
            "session_id": (64, lambda v: self.rt.lookup(self.keys, session_id=v)),
        }
        for name, (bits, call) in calls.items():
            for value in (-1, 2**bits):
                with self.subTest(name=name, value=value):
                    with self.assertRaises(OverflowError) as e:
                        call(value)
                    self.assertIn(f"{name} is {value}", str(e.exception))
            if bits == 64:
                continue
            with self.subTest(name=name, value=None):
                with self.assertRaises(TypeError) as e:
                    call(None)
                self.assertIn(f"{name} must be an int, not NoneType", str(e.exception))
        with self.assertRaises(OverflowError):
            self.rt.untrack_request(-1)
        # Nothing was tracked by the refused calls: -1 would have become
        # request 2**64 - 1 and been proposed for preemption.
        self.rt.report_engine_usage(1, 16)
        self.assertEqual(self.rt.propose_preemption(8), [])
        self.rt.track_request(2**64 - 1, self.keys, 4)  # the largest id is one
        self.assertEqual(self.rt.propose_preemption(8), [2**64 - 1])

    def test_cuda_values_out_of_range_are_refused(self):
        # ctypes passed device 2**32 on as device 0, and address -1 as
        # 2**64 - 1; refused here before any driver is asked.
        fake = [0x1000] * 4
        for kwargs, name in (({"cuda_device": 2**32}, "cuda_device is 4294967296"),
                             ({"cuda_device": -1}, "cuda_device is -1"),
                             ({"cuda_tensors": [0x1000, -1, 0x1000, 0x1000]},
                              "cuda_tensors[1] is -1"),
                             ({"cuda_tensors": [2**64] * 4}, f"cuda_tensors[0] is {2**64}"),
                             ({"cuda_stream": -1}, "cuda_stream is -1")):
            with self.subTest(**kwargs):
                with self.assertRaises(OverflowError) as e:
                    kvtier.Runtime(config_text=CONFIG, **dict({"cuda_tensors": fake}, **kwargs))
                self.assertIn(name, str(e.exception))
        with self.assertRaises(TypeError) as e:
            kvtier.Runtime(config_text=CONFIG, cuda_tensors=fake, cuda_device="0")
        self.assertIn("cuda_device must be an int, not str", str(e.exception))

    def test_a_second_library_is_refused_once_one_is_loaded(self):
        # library= was ignored once a library was loaded: a runtime opened in
        # the first one loaded, whatever build the engine asked for.
        lib = kvtier.load_library()
        loaded = lib._name  # the path it was loaded from
        with self.assertRaises(OSError) as e:
            kvtier.Runtime(config_text=CONFIG, library="/nonexistent/libkvtier-other.so")
        self.assertIn(f"libkvtier is loaded from {loaded} already", str(e.exception))
        with self.assertRaises(OSError):
            kvtier.load_library("/nonexistent/libkvtier-other.so")
        self.assertIs(kvtier.load_library(loaded), lib)
        with tempfile.TemporaryDirectory() as tmp:  # the same file by another name
            link = os.path.join(tmp, "libkvtier.so")
            os.symlink(os.path.abspath(loaded), link)
            self.assertIs(kvtier.load_library(link), lib)
            with kvtier.Runtime(config_text=CONFIG, library=link) as rt:
                self.assertEqual(rt.block_bytes, 8192)

    def test_keys_out_of_range_are_refused(self):
        for key in ((-1, 0), (0, 2**64), (1.5, 2)):
            with self.subTest(key=key):
                error = TypeError if isinstance(key[0], float) else OverflowError
                with self.assertRaises(error) as e:
                    self.rt.lookup([self.keys[0], key])
                self.assertIn("key 1's", str(e.exception))
                with self.assertRaises(error) as e:
                    self.rt.key_chain(list(range(16)), parent=key)
                self.assertIn("the parent's", str(e.exception))
        with self.assertRaises(TypeError) as e:
            self.rt.lookup([(1, 2, 3)])
        self.assertIn("(hi, lo) pair", str(e.exception))
        self.assertEqual(self.rt.lookup([(2**64 - 1, 0)]), (0, []))

    def test_callbacks_must_be_callable(self):
        with self.assertRaises(TypeError) as e:
            self.rt.load(self.keys, [4, 5, 6, 7], on_layer=5)
        self.assertIn("on_layer must be callable, not int", str(e.exception))
        save = self.rt.save(self.keys, [0, 1, 2, 3])
        with self.assertRaises(TypeError) as e:
            save.add_done_callback(5)
        self.assertIn("done callback must be callable", str(e.exception))
        self.assertEqual(save.wait(), kvtier.OK)
        with self.assertRaises(TypeError) as e:
            kvtier.Runtime(config_text=CONFIG, log="stderr")
        self.assertIn("log must be callable, not str", str(e.exception))

    def test_timeouts_may_be_infinite_never_nan(self):
        self.assertEqual(self.rt.save(self.keys, [0, 1, 2, 3]).wait(math.inf), kvtier.OK)
        load = self.rt.load(self.keys, [4, 5, 6, 7], timeout_s=math.inf)
        self.assertEqual(load.wait(), kvtier.OK)
        with self.assertRaises(ValueError) as e:
            load.wait(math.nan)
        self.assertIn("NaN", str(e.exception))
        with self.assertRaises(TypeError):
            self.rt.load(self.keys, [4, 5, 6, 7], timeout_s="1")
        from kvtier._convert import _ns
        self.assertEqual(_ns(-math.inf), 0)  # already past, not an OverflowError
        self.assertEqual(_ns(math.inf), 2**63 - 1)

    def test_each_failed_block_says_why(self):
        # A bad engine block fails the whole save, each block with the reason.
        save = self.rt.save(self.keys[:2], [0, 99])
        self.assertEqual(save.results(), [(kvtier.INVALID_ARGUMENT, 0)] * 2)
        for error in save.errors():
            self.assertEqual(error.code, kvtier.INVALID_ARGUMENT)
            self.assertIn("engine block 99 is out of range", error.message)
        self.assertEqual(self.rt.save(self.keys[:2], [0, 1]).errors(), [None, None])
        missing = self.rt.load([(5, 5)], [2], timeout_s=1)
        self.assertEqual(missing.errors()[0].code, kvtier.NOT_FOUND)
        self.assertNotEqual(missing.errors()[0].message, "")

    def test_a_call_refused_before_listing_its_blocks_fails_each_block(self):
        # Out of memory before C could list a call's blocks, its completion has
        # none: results() and errors() were empty, and an engine walking them
        # recomputed nothing. C's side is a C API test; here it is stood in for.
        script = (
            "import kvtier\n"
            "from kvtier._lib import lib\n"
            "from test_kvtier import CONFIG\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "save = rt.save(rt.key_chain(list(range(64))), [0, 1, 2, 3])\n"
            "assert save.wait() == kvtier.OK\n"
            "c = lib()\n"
            "c.kvtier_completion_wait = lambda h, ns: kvtier.RESOURCE_EXHAUSTED\n"
            "c.kvtier_completion_size = lambda h: 0\n"
            "c.kvtier_completion_result = lambda h, i, b: kvtier.RESOURCE_EXHAUSTED\n"
            "print(save.results())\n"
            "print([e.code for e in save.errors()])\n"
        )
        self.assert_script_prints(script, "[(3, 0), (3, 0), (3, 0), (3, 0)]\n[3, 3, 3, 3]\n")

    def test_engine_blocks_are_ints_whatever_holds_them(self):
        for b in range(4):
            self.rt.host_block_write(b, pattern(8192, b))
        # array.array took bytes as raw machine words: bytes([1, 0, 0, 0]) was
        # one block 1, and the call read three more ids past its buffer.
        self.assertEqual(self.rt.save(self.keys[:4], bytes([0, 1, 2, 3])).errors(), [None] * 4)
        self.assertEqual(self.rt.load(self.keys[:4], bytearray([8, 9, 10, 11])).wait(), kvtier.OK)
        for b in range(4):
            self.assertEqual(self.rt.host_block_read(8 + b), pattern(8192, b))
        for blocks, error in (([0, 1, -3, 2], OverflowError), ([0, 1, 2**32, 2], OverflowError),
                              ([0, 1, 2.0, 3], TypeError)):
            with self.subTest(blocks=blocks):
                with self.assertRaises(error) as e:
                    self.rt.save(self.keys[:4], blocks)
                self.assertIn("engine_blocks[2]", str(e.exception))
        with self.assertRaises(OverflowError) as e:
            self.rt.key_chain([1, 2**31] + [0] * 14)
        self.assertIn("tokens[1] is 2147483648", str(e.exception))

    def test_an_on_layer_that_raises_fails_the_load(self):
        for b in range(4):
            self.rt.host_block_write(b, pattern(8192, b))
        self.assertEqual(self.rt.save(self.keys[:4], [0, 1, 2, 3]).wait(), kvtier.OK)
        seen = []

        def on_layer(layer):
            seen.append(layer)
            raise RuntimeError(f"attention for layer {layer} failed")
        # ctypes printed the exception and the load ended OK, its later
        # layers still reported.
        load = self.rt.load(self.keys[:4], [8, 9, 10, 11], on_layer=on_layer)
        self.assertEqual(load.wait(), kvtier.INTERNAL)
        self.assertEqual(seen, [0])
        for error in load.errors():
            self.assertEqual(error.code, kvtier.INTERNAL)
            self.assertIn("on_layer failed: RuntimeError: attention for layer 0 failed",
                          error.message)
        # The blocks stay stored, and a load without the fault succeeds.
        self.assertEqual(self.rt.load(self.keys[:4], [8, 9, 10, 11],
                                      on_layer=lambda layer: None).wait(), kvtier.OK)
        self.assertEqual(self.rt.host_block_read(11), pattern(8192, 3))

    def test_overrides_none_is_no_overrides(self):
        with kvtier.Runtime(config_text=CONFIG, overrides=None) as rt:
            self.assertEqual(rt.block_bytes, 8192)

    def test_a_script_may_end_with_callbacks_still_due(self):
        # A kvtier thread that ran a callback once Python had begun to finalize
        # was ended inside it, which aborted the process ("FATAL: exception not
        # rethrown"). Open runtimes now close at exit, running those callbacks.
        script = (
            "import kvtier\n"
            "from test_kvtier import CONFIG\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "k = rt.key_chain(list(range(64)))\n"
            "assert rt.save(k, [0, 1, 2, 3]).wait() == kvtier.OK\n"
            "load = rt.load(k, [4, 5, 6, 7], on_layer=lambda layer: None)\n"
            "save = rt.save(rt.key_chain(list(range(100, 164))), [8, 9, 10, 11])\n"
            "save.add_done_callback(lambda: print('done', flush=True))\n"
        )
        for _ in range(3):  # it failed every time, but the timing is the threads'
            self.assert_script_prints(script, "done\n")

    def test_a_done_callback_may_read_its_own_results(self):
        # results() waits first: from the callback, on the kvtier thread that
        # finishes the load, that wait was for the callback itself, which
        # hung the load, close() and the interpreter's exit.
        script = (
            "import time, kvtier\n"
            "from test_kvtier import CONFIG\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "k = rt.key_chain(list(range(64)))\n"
            "assert rt.save(k, [0, 1, 2, 3]).wait() == kvtier.OK\n"
            "load = rt.load(k, [4, 5, 6, 7], on_layer=lambda layer: time.sleep(0.05))\n"
            "got = []\n"
            "load.add_done_callback(lambda: got.append(load.results()))\n"
            "print(load.wait(10), got == [load.results()], flush=True)\n"
            "print([code for code, _ in got[0]], flush=True)\n"
            "rt.close()\n"
        )
        self.assert_script_prints(script, "%d True\n[0, 0, 0, 0]\n" % kvtier.OK)


if __name__ == "__main__":
    unittest.main()
