"""The Python binding (python/kvtier) against the built libkvtier.so:
the path a Python serving engine takes. Run by ctest with KVTIER_LIBRARY and
PYTHONPATH set; `python3 tests/python/test_kvtier.py` does the same by hand."""

import array
import asyncio
import logging
import os
import signal
import threading
import time
import unittest

import kvtier

CONFIG = """
model:
  preset: tiny
  block_tokens: 16
engine:
  pool_blocks: 16
runtime:
  gpu_watermark: 0.1
tiers:
  - name: host
    type: host
    capacity: 1MiB
    hugepages: false
    mlock: false
"""


def pattern(size, seed):
    return bytes(((i * 131 + seed * 7919) >> 3) & 0xFF for i in range(size))


class KvtierBindingTest(unittest.TestCase):
    def setUp(self):
        self.rt = kvtier.Runtime(config_text=CONFIG)

    def tearDown(self):
        self.rt.close()

    def test_geometry_and_keys(self):
        self.assertEqual(self.rt.block_bytes, 8192)
        self.assertEqual(self.rt.block_tokens, 16)
        self.assertEqual(self.rt.engine_blocks, 16)
        self.assertNotEqual(self.rt.namespace, 0)
        tokens = list(range(3 * 16 + 5))
        keys = self.rt.key_chain(tokens)
        self.assertEqual(len(keys), 3)  # the partial block has no key
        self.assertEqual(len(set(keys)), 3)
        self.assertEqual(self.rt.key_chain(tokens[16:48], parent=keys[0]), keys[1:])
        self.assertEqual(self.rt.key_chain(tokens[:15]), [])
        self.assertNotEqual(self.rt.key_from_engine_hash(b"abc", parent=keys[0]),
                            self.rt.key_from_engine_hash(b"abd", parent=keys[0]))
        first = self.rt.key_from_engine_hash(b"h1", parent=keys[0])
        second = self.rt.key_from_engine_hash(b"h2", parent=first)
        self.assertEqual(self.rt.keys_from_engine_hashes([b"h1", b"h2"], parent=keys[0]),
                         [first, second])
        self.assertEqual(len(self.rt.keys_from_engine_hashes([])), 0)
        with self.assertRaises(kvtier.KvtierError):
            self.rt.keys_from_engine_hashes([b"a", b"bc"])

    def test_keys_from_arrays_and_slices(self):
        tokens = list(range(7, 7 + 4 * 16 + 3))
        keys = self.rt.key_chain(tokens)
        self.assertIsInstance(keys, kvtier.Keys)
        self.assertEqual(self.rt.key_chain(array.array("i", tokens)), keys)
        self.assertEqual(list(keys[1:3]), [keys[1], keys[2]])
        self.assertEqual(keys[-1], keys[3])
        self.assertEqual(keys[::2], [keys[0], keys[2]])
        self.assertEqual(len(keys[3:1]), 0)
        with self.assertRaises(IndexError):
            keys[4]
        for b in range(4):
            self.rt.host_block_write(b, pattern(8192, b + 20))
        # A slice is passed as a pointer into the same array; blocks as array('I').
        self.assertEqual(self.rt.save(keys[:2], array.array("I", [0, 1])).wait(), kvtier.OK)
        self.assertEqual(self.rt.lookup(keys[2:]), (0, []))  # the slice starts at keys[2]
        self.assertEqual(self.rt.save(keys[2:], [2, 3], parent=keys[1]).wait(), kvtier.OK)
        self.assertEqual(self.rt.lookup(keys[1:]), (3, [0, 0, 0]))
        self.assertEqual(self.rt.lookup(keys), (4, [0, 0, 0, 0]))
        self.assertEqual(self.rt.load(keys[2:], array.array("I", [8, 9])).wait(), kvtier.OK)
        self.assertEqual(self.rt.host_block_read(9), pattern(8192, 23))
        self.assertEqual(self.rt.lookup(keys[:0]), (0, []))

    def test_save_lookup_load_round_trip(self):
        keys = self.rt.key_chain(list(range(100, 100 + 3 * 16)))
        for b in range(3):
            self.rt.host_block_write(b, pattern(8192, b + 1))
        done = self.rt.save(keys, [0, 1, 2])
        self.assertEqual(done.wait(), kvtier.OK)
        self.assertEqual(done.results(), [(kvtier.OK, 8192)] * 3)
        self.assertEqual(self.rt.lookup(keys, request_id=7), (3, [0, 0, 0]))
        self.assertTrue(self.rt.is_saved(keys))

        layers = []
        lock = threading.Lock()

        def on_layer(layer):
            with lock:
                layers.append(layer)

        load = self.rt.load(keys, [10, 11, 12], timeout_s=10, on_layer=on_layer)
        self.assertEqual(load.wait(), kvtier.OK)
        self.assertEqual(load.layers_done, 4)
        with lock:
            self.assertEqual(layers, [0, 1, 2, 3])
        for b in range(3):
            self.assertEqual(self.rt.host_block_read(10 + b), pattern(8192, b + 1))
        self.assertEqual(self.rt.stats()["saved_blocks"], 3)
        self.assertIn("\nkvtier_saved_blocks_total 3\n", self.rt.metrics_text())

        self.rt.request_finished(keys, 42)
        self.rt.remove(keys)
        self.assertFalse(self.rt.is_saved(keys))
        miss = self.rt.load(keys[:1], [13])
        self.assertEqual(miss.wait(), kvtier.NOT_FOUND)
        self.assertEqual(miss.results(), [(kvtier.NOT_FOUND, 0)])

    def test_pinned_hits_survive_until_released(self):
        # A hub of five blocks: four pinned ones leave no room for another chain.
        with kvtier.Runtime(config_text=CONFIG.replace("capacity: 1MiB", "capacity: 40KiB")) as rt:
            a = rt.key_chain(list(range(1, 1 + 4 * 16)))
            b = rt.key_chain(list(range(90000, 90000 + 4 * 16)))
            self.assertEqual(rt.save(a, [0, 1, 2, 3]).wait(), kvtier.OK)
            with rt.lookup_and_pin(a) as pin:
                self.assertEqual((pin.hit_blocks, pin.tiers), (4, [0, 0, 0, 0]))
                self.assertNotEqual(rt.save(b, [4, 5, 6, 7]).wait(), kvtier.OK)
                self.assertEqual(rt.lookup(a)[0], 4)
            self.assertEqual(rt.save(b, [4, 5, 6, 7]).wait(), kvtier.OK)
            self.assertEqual(rt.lookup(b)[0], 4)
            kept = rt.lookup_and_pin(a[:1])  # released by close, then freed
        kept.release()

    def test_done_callbacks_and_asyncio(self):
        keys = self.rt.key_chain(list(range(500, 500 + 2 * 16)))
        for b in range(2):
            self.rt.host_block_write(b, pattern(8192, b + 7))
        save = self.rt.save(keys, [0, 1])
        calls = []
        save.add_done_callback(lambda: calls.append("first"))
        self.assertEqual(save.wait(), kvtier.OK)
        self.assertEqual(calls, ["first"])  # ran before wait() returned
        save.add_done_callback(lambda: calls.append("late"))
        self.assertEqual(calls, ["first", "late"])  # done already: ran at once

        async def load_both():
            loads = [self.rt.load(keys[:1], [5]), self.rt.load(keys, [6, 7])]
            return await asyncio.gather(*(c.wait_async() for c in loads))

        self.assertEqual(asyncio.run(load_both()), [kvtier.OK, kvtier.OK])
        self.assertEqual(self.rt.host_block_read(7), pattern(8192, 8))

    def test_a_forked_child_gets_errors_and_closes_at_once(self):
        # A Python engine that forks workers after opening kvtier: the child
        # has none of the runtime's threads, so calls must fail, not hang.
        keys = self.rt.key_chain(list(range(700, 700 + 2 * 16)))
        self.assertEqual(self.rt.save(keys, [0, 1]).wait(), kvtier.OK)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    self.rt.lookup(keys)
                    code = 2
                except kvtier.KvtierError as e:
                    code = 0 if e.code == kvtier.UNAVAILABLE else 3
                self.rt.close()
            finally:
                os._exit(code)
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.fail("the forked child hung")
            time.sleep(0.005)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(self.rt.lookup(keys)[0], 2)  # the parent's runtime is untouched

    def test_log_lines_go_to_the_callback_or_logging(self):
        seen = []
        with kvtier.Runtime(config_text=CONFIG, log=lambda level, msg: seen.append((level, msg))):
            pass
        self.assertEqual(seen, [])  # a clean open logs nothing; the C API tests provoke warnings
        records = []

        class Collect(logging.Handler):
            def emit(self, record):
                records.append((record.levelno, record.getMessage()))

        logger = logging.getLogger("kvtier-test")
        logger.addHandler(Collect())
        logger.setLevel(logging.DEBUG)
        sink = kvtier.logging_sink(logger)
        sink(kvtier.LOG_WARNING, "disk 50% full")
        sink(kvtier.LOG_INFO, "reconnected")
        self.assertEqual(records, [(logging.WARNING, "disk 50% full"),
                                   (logging.INFO, "reconnected")])

    def test_freeing_a_running_load_does_not_wait_and_keeps_its_callback(self):
        keys = self.rt.key_chain(list(range(900, 900 + 16)))
        self.rt.host_block_write(0, pattern(8192, 31))
        self.assertEqual(self.rt.save(keys, [0]).wait(), kvtier.OK)
        release = threading.Event()
        layers = []

        def on_layer(layer):
            release.wait(10)  # holds the copy until the test lets it go
            layers.append(layer)

        load = self.rt.load(keys, [1], on_layer=on_layer)
        freeing = threading.Thread(target=load.free)
        freeing.start()
        freeing.join(5)
        self.assertFalse(freeing.is_alive(), "free() waited for the running load")
        del load
        release.set()
        deadline = time.monotonic() + 10
        while kvtier.completion._orphans and time.monotonic() < deadline:
            time.sleep(0.005)
        self.assertEqual(kvtier.completion._orphans, {})
        self.assertEqual(layers, [0, 1, 2, 3])  # the callback lived through every call
        self.assertEqual(self.rt.host_block_read(1), pattern(8192, 31))

    def test_errors_raise_with_code_and_message(self):
        with self.assertRaises(kvtier.KvtierError) as e:
            kvtier.Runtime(config_text="tiers:\n  - name: host\n    type: hots\n")
        self.assertEqual(e.exception.code, kvtier.INVALID_ARGUMENT)
        self.assertIn("config_text:3:", e.exception.message)
        with self.assertRaises(kvtier.KvtierError) as e:
            self.rt.lookup([(1, 2)], expected_reuse=2.0)
        self.assertIn("expected_reuse must be in [0, 1]", e.exception.message)
        with self.assertRaises(kvtier.KvtierError) as e:
            self.rt.host_block_write(0, b"short")
        self.assertEqual(e.exception.code, kvtier.INVALID_ARGUMENT)
        with self.assertRaises(OverflowError):  # an engine block id below 0
            self.rt.load(self.rt.key_chain(list(range(16))), [-1])
        self.assertEqual(kvtier.code_name(kvtier.CORRUPTION), "corruption")
        fake = [0x1000] * 4  # not device memory: refused after the shape check
        with self.assertRaises(kvtier.KvtierError) as e:
            kvtier.Runtime(config_text=CONFIG, cuda_tensors=fake, cuda_shape=(2, 16, 16, 8, 16))
        self.assertIn("cuda tensors hold nhd:L4:H8:D16:T16:E2", e.exception.message)
        self.assertRegex(kvtier.version(), r"^\d+\.\d+\.\d+$")

    def test_gpu_pool_admission_and_preemption(self):
        self.assertTrue(self.rt.should_admit(1000))  # nothing reported yet
        self.rt.report_engine_usage(30, 100)
        self.assertTrue(self.rt.should_admit(20))
        self.assertFalse(self.rt.should_admit(21))
        stored = self.rt.key_chain(list(range(1000, 1032)))
        fresh = self.rt.key_chain(list(range(2000, 2032)))
        for b in range(2):
            self.rt.host_block_write(b, pattern(8192, b))
        self.assertEqual(self.rt.save(stored, [0, 1]).wait(), kvtier.OK)
        self.rt.track_request(1, stored, 4)
        self.rt.track_request(2, fresh, 4)
        self.assertEqual(self.rt.propose_preemption(4), [1])
        self.assertEqual(self.rt.propose_preemption(8), [1, 2])
        self.rt.untrack_request(1)
        self.assertEqual(self.rt.propose_preemption(4), [2])


if __name__ == "__main__":
    unittest.main()
