"""The Python binding (python/kvtier) against the built libkvtier.so:
the path a Python serving engine takes. Run by ctest with KVTIER_LIBRARY and
PYTHONPATH set; `python3 tests/python/test_kvtier.py` does the same by hand."""

import array
import asyncio
import collections.abc
import logging
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import tempfile
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

    def run_script(self, script, timeout=60):
        """Runs `script` in a separate Python (a failure there may end the
        process) and checks that it exits 0; returns the finished run."""
        run = subprocess.run([sys.executable, "-c", script], env=os.environ,
                             capture_output=True, text=True, timeout=timeout)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        return run

    def poll(self, completion):
        """The loop wait()'s docstring gives, bounded: the code it ends with."""
        for _ in range(1000):
            code = completion.wait(0.01)
            if code is not None:
                return code
        self.fail("the poll loop did not end")

    def test_geometry_and_keys(self):
        self.assertEqual(self.rt.block_bytes, 8192)
        self.assertEqual(self.rt.block_tokens, 16)
        self.assertEqual(self.rt.engine_blocks, 16)
        self.assertEqual(self.rt.state_blocks, 0)
        self.assertNotEqual(self.rt.namespace, 0)
        tokens = list(range(3 * 16 + 5))
        keys = self.rt.key_chain(tokens)
        self.assertEqual(len(keys), 3)  # the partial block has no key
        self.assertEqual(len(set(keys)), 3)
        self.assertEqual(self.rt.key_chain(tokens[16:48], parent=keys[0]), keys[1:])
        self.assertEqual(self.rt.key_chain(tokens[:15]), [])
        # An extra (a LoRA adapter's id) separates every key; none, or an empty
        # one, is the plain chain.
        lora = self.rt.key_chain(tokens, extra=b"adapter-7")
        self.assertEqual(len(lora), 3)
        self.assertEqual(set(lora) & set(keys), set())
        self.assertEqual(self.rt.key_chain(tokens[16:32], parent=lora[0], extra=b"adapter-7"),
                         lora[1:2])
        self.assertNotEqual(self.rt.key_chain(tokens, extra=b"adapter-8"), lora)
        self.assertEqual(self.rt.key_chain(tokens, extra=b""), keys)
        with self.assertRaises(TypeError):
            self.rt.key_chain(tokens, extra=7)
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

    def test_hybrid_state_checkpoints_gate_lookups_and_round_trip(self):
        rt = kvtier.Runtime(config_text=CONFIG, overrides=["runtime.state_blocks=2"])
        try:
            self.assertEqual(rt.state_blocks, 2)
            keys = rt.key_chain(list(range(100, 100 + 3 * 16)))
            for b in range(5):
                rt.host_block_write(b, pattern(8192, b + 1))
            self.assertEqual(rt.save(keys, [0, 1, 2]).wait(), kvtier.OK)
            self.assertEqual(rt.lookup(keys), (0, []))  # no state anywhere yet
            done = rt.save_state(keys[1], [3, 4])
            self.assertEqual(done.wait(), kvtier.OK)
            self.assertEqual(done.results(), [(kvtier.OK, 8192)] * 2)
            self.assertEqual(rt.lookup(keys), (2, [0, 0]))
            self.assertEqual(rt.stats()["lookup_state_cut_blocks"], 4)
            load = rt.load_state(keys[1], [10, 11], timeout_s=10)
            self.assertEqual(load.wait(), kvtier.OK)
            self.assertEqual(rt.host_block_read(10), pattern(8192, 4))
            self.assertEqual(rt.host_block_read(11), pattern(8192, 5))
            miss = rt.load_state(keys[0], [12, 13])
            self.assertEqual(miss.wait(), kvtier.NOT_FOUND)
            self.assertEqual(miss.results(), [(kvtier.NOT_FOUND, 0)] * 2)
            self.assertEqual(rt.save_state(keys[2], [3]).wait(), kvtier.INVALID_ARGUMENT)
            for call in (rt.save_state, rt.load_state):
                with self.subTest(call=call.__name__):
                    with self.assertRaises(ValueError) as e:  # used to say "a parent is ..."
                        call(keys[:2], [3, 4])
                    self.assertIn("a boundary is one key, not 2", str(e.exception))
        finally:
            rt.close()
        off = self.rt.save_state(self.rt.key_chain(list(range(16)))[0], [0, 1])
        self.assertEqual(off.wait(), kvtier.INVALID_ARGUMENT)

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
        # A thread of the parent's, waiting on a load at the fork, is not in
        # the child: freeing the load there must not wait for it.
        keys = self.rt.key_chain(list(range(700, 700 + 2 * 16)))
        self.assertEqual(self.rt.save(keys, [0, 1]).wait(), kvtier.OK)
        release = threading.Event()
        load = self.rt.load(keys[:1], [2], on_layer=lambda layer: release.wait(10))
        waiter = threading.Thread(target=load.wait)
        waiter.start()
        deadline = time.monotonic() + 5
        while not load._calls.threads and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertTrue(load._calls.threads, "the waiter never entered the wait")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    self.rt.lookup(keys)
                    code = 2
                except kvtier.KvtierError as e:
                    code = 3 if e.code != kvtier.UNAVAILABLE else 1
                # Success only once freeing and closing have returned too.
                load.free()
                self.rt.close()
                if code == 1:
                    code = 0
            except BaseException:
                code = 9
            finally:
                os._exit(code)
        release.set()
        waiter.join(10)
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
        # Refused before the C call, with the code's name first like C's messages.
        for call in (lambda: self.rt.save(self.rt.key_chain(list(range(16))), [0, 1]),
                     lambda: self.rt.load(self.rt.key_chain(list(range(16))), [0, 1]),
                     lambda: self.rt.keys_from_engine_hashes([b"a", b"bc"])):
            with self.assertRaises(kvtier.KvtierError) as e:
                call()
            self.assertEqual(e.exception.code, kvtier.INVALID_ARGUMENT)
            self.assertTrue(e.exception.message.startswith("invalid_argument: "),
                            e.exception.message)
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

    def test_many_victims_are_proposed_and_counted_once(self):
        # More victims than a first guess at the buffer holds: the C call
        # counts every victim of a call that does not fit, and a second call
        # counted them all again.
        self.rt.report_engine_usage(0, 4000)
        keys = self.rt.key_chain(list(range(3000, 3016)))
        for request_id in range(1, 1501):
            self.rt.track_request(request_id, keys, 1)
        before = self.rt.stats()["preemption_proposals"]
        victims = self.rt.propose_preemption(3000)
        self.assertEqual(sorted(victims), list(range(1, 1501)))
        self.assertEqual(self.rt.stats()["preemption_proposals"] - before, 1500)

    def test_engine_hashes_and_blocks_count_bytes_not_items(self):
        # An array of 8-byte items: all 16 bytes name the block, so two hashes
        # that differ only past the first two bytes give different keys.
        a = array.array("Q", [1, 2])
        b = array.array("Q", [1, 3])
        self.assertNotEqual(self.rt.key_from_engine_hash(a), self.rt.key_from_engine_hash(b))
        self.assertEqual(self.rt.key_from_engine_hash(a), self.rt.key_from_engine_hash(bytes(a)))
        self.assertEqual(self.rt.keys_from_engine_hashes([a])[0], self.rt.key_from_engine_hash(a))
        # A block given as 2-byte items (fp16 data) of block_bytes bytes.
        data = array.array("H", range(4096))
        self.rt.host_block_write(3, data)
        self.assertEqual(self.rt.host_block_read(3), bytes(data))

    def test_two_threads_ending_one_pin_end_it_once(self):
        # The C call lets go of the GIL: both threads used to pass the check
        # before either cleared the handle, and unpin it twice.
        import kvtier.completion as completion_module
        keys = self.rt.key_chain(list(range(900, 932)))
        self.rt.host_block_write(0, pattern(8192, 9))
        self.rt.host_block_write(1, pattern(8192, 10))
        self.assertEqual(self.rt.save(keys, [0, 1]).wait(), kvtier.OK)
        pin = self.rt.lookup_and_pin(keys)
        real = completion_module.lib()
        calls = []

        class SlowUnpin:
            def __getattr__(self, name):
                return getattr(real, name)

            def kvtier_unpin(self, handle):
                calls.append(handle)
                time.sleep(0.05)
                return real.kvtier_unpin(handle)

        original = completion_module.lib
        completion_module.lib = lambda: SlowUnpin()
        try:
            threads = [threading.Thread(target=pin.release) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            completion_module.lib = original
        self.assertEqual(len(calls), 1)

    def test_a_closed_runtime_raises_its_own_error(self):
        rt = kvtier.Runtime(config_text=CONFIG)
        rt.close()
        with self.assertRaises(kvtier.KvtierError):
            rt.key_chain(list(range(32)))

    def test_every_call_on_a_closed_runtime_says_it_is_closed(self):
        # Properties and void or bool calls used to answer 0, None or False,
        # and the others "runtime is NULL".
        rt = kvtier.Runtime(config_text=CONFIG)
        keys = rt.key_chain(list(range(32)))
        rt.close()
        calls = {
            "namespace": lambda: rt.namespace,
            "block_bytes": lambda: rt.block_bytes,
            "block_tokens": lambda: rt.block_tokens,
            "engine_blocks": lambda: rt.engine_blocks,
            "state_blocks": lambda: rt.state_blocks,
            "should_admit": lambda: rt.should_admit(1),
            "untrack_request": lambda: rt.untrack_request(1),
            "key_chain": lambda: rt.key_chain(list(range(32))),
            "lookup": lambda: rt.lookup(keys),
            "save": lambda: rt.save(keys, [0, 1]),
            "stats": rt.stats,
            "host_block_read": lambda: rt.host_block_read(0),
        }
        for name, call in calls.items():
            with self.subTest(name):
                with self.assertRaises(kvtier.KvtierError) as e:
                    call()
                self.assertEqual(e.exception.code, kvtier.INVALID_ARGUMENT)
                self.assertIn("runtime is closed", e.exception.message)
        rt.close()  # closing again is no error

    def test_every_call_on_a_freed_completion_says_it_is_freed(self):
        keys = self.rt.key_chain(list(range(16)))
        done = self.rt.save(keys, [0])
        self.assertEqual(done.wait(), kvtier.OK)
        done.free()
        calls = {
            "wait": done.wait,  # used to return INVALID_ARGUMENT as if the save failed
            "done": lambda: done.done,
            "layers_done": lambda: done.layers_done,
            "results": done.results,  # used to return []
            "add_done_callback": lambda: done.add_done_callback(lambda: None),
        }
        for name, call in calls.items():
            with self.subTest(name):
                with self.assertRaises(kvtier.KvtierError) as e:
                    call()
                self.assertIn("completion is freed", e.exception.message)
        done.free()

    def test_freeing_a_completion_waits_for_a_wait_on_another_thread(self):
        # ctypes lets go of the GIL in a call: free() used to free the handle
        # under a thread blocked in kvtier_completion_wait on it.
        import kvtier.completion as completion_module
        keys = self.rt.key_chain(list(range(1100, 1100 + 16)))
        self.rt.host_block_write(0, pattern(8192, 41))
        self.assertEqual(self.rt.save(keys, [0]).wait(), kvtier.OK)
        release = threading.Event()
        load = self.rt.load(keys, [1], on_layer=lambda layer: release.wait(10))
        real = completion_module.lib()
        entered = threading.Event()
        order, codes = [], []

        class Waiting:
            def __getattr__(self, name):
                return getattr(real, name)

            def kvtier_completion_wait(self, handle, timeout_ns):
                entered.set()
                code = real.kvtier_completion_wait(handle, timeout_ns)
                order.append("wait returned")  # back from C
                return code

        original = completion_module.lib
        completion_module.lib = lambda: Waiting()
        try:
            waiter = threading.Thread(target=lambda: codes.append(load.wait()))
            waiter.start()
            self.assertTrue(entered.wait(5))
            # The load ends while free() waits; a free() that does not wait
            # returns first.
            threading.Timer(0.05, release.set).start()
            load.free()
            order.append("freed")
            waiter.join(10)
        finally:
            release.set()
            completion_module.lib = original
        self.assertEqual(order, ["wait returned", "freed"])
        self.assertEqual(codes, [kvtier.OK])
        with self.assertRaises(kvtier.KvtierError):
            load.wait()

    def test_closing_a_runtime_waits_for_calls_on_other_threads(self):
        # Threads looking up and reading stats while another closes: each call
        # succeeds or says the runtime is closed, and kvtier_close never runs
        # while a call is still inside C (it used to: a use after free).
        import kvtier.runtime as runtime_module
        rt = kvtier.Runtime(config_text=CONFIG)
        keys = rt.key_chain(list(range(4 * 16)))
        real = runtime_module.lib()
        lock = threading.Lock()
        state = {"calls": 0, "inside": 0, "closed_under_calls": None}
        held, closing = threading.Event(), threading.Event()

        class Counting:
            def __getattr__(self, name):
                return getattr(real, name)

            def _count(self, fn, *args):
                with lock:
                    state["calls"] += 1
                    state["inside"] += 1
                    hold = state["calls"] == 20  # one call stays in until close starts
                try:
                    if hold:
                        held.set()
                        closing.wait(5)
                    return fn(*args)
                finally:
                    with lock:
                        state["inside"] -= 1

            def kvtier_lookup(self, *args):
                return self._count(real.kvtier_lookup, *args)

            def kvtier_stats_json(self, *args):
                return self._count(real.kvtier_stats_json, *args)

            def kvtier_close(self, handle):
                with lock:
                    state["closed_under_calls"] = state["inside"]
                real.kvtier_close(handle)

        outcomes, unexpected = [], []

        def work():
            try:
                for i in range(200):
                    if i % 2:
                        rt.stats()
                    else:
                        rt.lookup(keys)
                outcomes.append("done")
            except kvtier.KvtierError as e:
                if e.code == kvtier.INVALID_ARGUMENT and "runtime is closed" in e.message:
                    outcomes.append("closed")
                else:
                    unexpected.append(e)
            except Exception as e:  # noqa: BLE001: reported below
                unexpected.append(e)

        original = runtime_module.lib
        runtime_module.lib = lambda: Counting()
        try:
            workers = [threading.Thread(target=work) for _ in range(4)]
            for t in workers:
                t.start()
            self.assertTrue(held.wait(5))
            closing.set()
            rt.close()
            for t in workers:
                t.join(10)
        finally:
            closing.set()
            runtime_module.lib = original
            rt.close()
        self.assertEqual(unexpected, [])
        self.assertEqual(len(outcomes), 4)
        self.assertIn("closed", outcomes)
        self.assertEqual(state["closed_under_calls"], 0)

    def test_a_done_callback_may_free_its_own_completion(self):
        # A callback run at once, inside add_done_callback's own call: the
        # handle is freed once that call returns, not under it, and free()
        # does not wait for the call it is inside.
        keys = self.rt.key_chain(list(range(1200, 1200 + 16)))
        save = self.rt.save(keys, [0])
        self.assertEqual(save.wait(), kvtier.OK)
        save.add_done_callback(save.free)
        with self.assertRaises(kvtier.KvtierError) as e:
            save.done
        self.assertIn("completion is freed", e.exception.message)

    def test_keys_compare_unequal_to_what_is_not_a_sequence(self):
        keys = self.rt.key_chain(list(range(32)))
        self.assertFalse(keys == None)  # noqa: E711: the operator is what is tested
        self.assertTrue(keys != None)  # noqa: E711
        self.assertNotEqual(keys, 5)
        self.assertEqual(keys, list(keys))

    def test_overrides_may_be_one_string_or_bytes(self):
        # A str used to be taken as a list of one-character overrides.
        small = "tiers.host.capacity=40KiB"
        for overrides in (small, small.encode(), [small.encode()], (small,)):
            with self.subTest(overrides=overrides):
                with kvtier.Runtime(config_text=CONFIG, overrides=overrides) as rt:
                    self.assertEqual(rt.stats()["tiers"][0]["capacity_bytes"], 40 << 10)

    def test_paths_and_texts_may_be_path_like_or_bytes(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "kvtier.yaml"
            path.write_text(CONFIG)
            for config_path in (path, bytes(path), str(path)):
                with self.subTest(config_path=config_path):
                    with kvtier.Runtime(config_path=config_path) as rt:
                        self.assertEqual(rt.block_bytes, 8192)
        with kvtier.Runtime(config_text=CONFIG.encode()) as rt:
            self.assertEqual(rt.block_bytes, 8192)

    def test_a_parent_is_one_key_or_a_one_key_slice(self):
        tokens = list(range(300, 300 + 3 * 16))
        keys = self.rt.key_chain(tokens)
        for parent in (keys[0], keys[0:1], [keys[0]], list(keys[0])):
            with self.subTest(parent=parent):
                self.assertEqual(self.rt.key_chain(tokens[16:], parent=parent), keys[1:])
                self.assertEqual(self.rt.key_from_engine_hash(b"h", parent=parent),
                                 self.rt.key_from_engine_hash(b"h", parent=keys[0]))
                self.assertEqual(self.rt.keys_from_engine_hashes([b"h"], parent=parent),
                                 [self.rt.key_from_engine_hash(b"h", parent=keys[0])])
        self.assertEqual(self.rt.save(keys[:1], [0]).wait(), kvtier.OK)
        self.assertEqual(self.rt.save(keys[1:2], [1], parent=keys[0:1]).wait(), kvtier.OK)
        self.assertEqual(self.rt.lookup(keys)[0], 2)
        for parent in (keys[0:2], keys[:0], [keys[0], keys[1]], (1, 2, 3)):
            with self.subTest(parent=parent):
                with self.assertRaises(ValueError) as e:
                    self.rt.key_chain(tokens[16:], parent=parent)
                self.assertIn("parent is one key", str(e.exception))
        with self.assertRaises(TypeError) as e:  # used to say "object of type 'int' has no len()"
            self.rt.key_chain(tokens[16:], parent=5)
        self.assertIn("a parent is one key, a (hi, lo) pair, not int", str(e.exception))

    def test_one_key_where_keys_go_is_a_clear_type_error(self):
        keys = self.rt.key_chain(list(range(16)))
        with self.assertRaises(TypeError) as e:
            self.rt.lookup(keys[0])  # used to say "cannot unpack non-iterable int object"
        self.assertIn("keys[i:i+1]", str(e.exception))
        self.assertEqual(self.rt.lookup([keys[0]]), (0, []))

    def test_an_engine_hash_is_bytes_never_an_int_or_a_str(self):
        # bytes(5) is five zero bytes: an int hash used to give a key silently,
        # and one bytes object given as the list of hashes one key per byte.
        for bad in (5, "abc"):
            with self.subTest(hash=bad):
                with self.assertRaises(TypeError) as e:
                    self.rt.key_from_engine_hash(bad)
                self.assertIn("bytes-like", str(e.exception))
        for bad in (b"abc", [5]):
            with self.subTest(hashes=bad):
                with self.assertRaises(TypeError) as e:
                    self.rt.keys_from_engine_hashes(bad)
                self.assertIn("bytes-like", str(e.exception))
        with self.assertRaises(TypeError):
            self.rt.host_block_write(0, 8192)  # used to write a block of zeros

    def test_timeouts_past_or_too_far_are_clamped(self):
        from kvtier._convert import _ns
        self.assertEqual(_ns(None), -1)  # no limit
        self.assertEqual(_ns(-0.001), 0)  # already past: at once, never "no limit"
        self.assertEqual(_ns(2**64 / 1e9), 2**63 - 1)  # never wrapped to 0
        self.assertEqual(_ns(1.5), 1_500_000_000)

    def test_an_interrupt_while_a_call_leaves_does_not_leave_it_in_flight(self):
        # Ctrl-C inside the bookkeeping that ends a call: the call used to
        # stay counted in flight, and close() on another thread waited for it
        # forever.
        class InterruptOnce(list):
            fired = False

            def remove(self, item):
                if not InterruptOnce.fired:
                    InterruptOnce.fired = True
                    raise KeyboardInterrupt
                super().remove(item)

        calls = self.rt._calls
        with calls.lock:
            calls.threads = InterruptOnce(calls.threads)
        with self.assertRaises(KeyboardInterrupt):
            self.rt.lookup(self.rt.key_chain(list(range(16))))
        self.assertTrue(InterruptOnce.fired)
        closing = threading.Thread(target=self.rt.close)
        closing.start()
        closing.join(5)
        self.assertFalse(closing.is_alive(), "close() waited for a call that had returned")

    def test_an_interrupt_after_a_load_started_keeps_its_callback_alive(self):
        # Ctrl-C after kvtier_load had started the load, as its call returned:
        # the handle and the on_layer thunk were dropped while the load still
        # ran, and the thunk was called after it was freed. A separate
        # process, as that may end it.
        script = (
            "import gc, threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "keys = rt.key_chain(list(range(16)))\n"
            "rt.host_block_write(0, bytes(range(256)) * 32)\n"
            "assert rt.save(keys, [0]).wait() == kvtier.OK\n"
            "go = threading.Event()\n"
            "layers = []\n"
            "def on_layer(layer):\n"
            "    go.wait(10)\n"
            "    layers.append(layer)\n"
            "leave = rt._leave\n"
            "def interrupted_leave(me):\n"
            "    leave(me)\n"
            "    rt._leave = leave\n"
            "    raise KeyboardInterrupt\n"
            "rt._leave = interrupted_leave\n"
            "try:\n"
            "    rt.load(keys, [1], on_layer=on_layer)\n"
            "    raise SystemExit('no interrupt')\n"
            "except KeyboardInterrupt:\n"
            "    pass\n"
            "gc.collect()\n"
            "go.set()\n"
            "import time\n"
            "deadline = time.monotonic() + 10\n"
            "while len(layers) < 4 and time.monotonic() < deadline:\n"
            "    time.sleep(0.005)\n"
            "assert layers == [0, 1, 2, 3], layers\n"
            "rt.close()\n"
        )
        self.run_script(script)

    def test_a_runtime_collected_on_its_own_thread_closes(self):
        # A runtime in a reference cycle (its owner's bound method as `log`)
        # collected inside an on_layer callback, on a worker of the runtime:
        # closing there would join the thread it runs on (the process
        # aborted). A separate process, as a failure ends it.
        script = (
            "import gc, threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "class Owner:\n"
            "    def __init__(self):\n"
            "        self.rt = kvtier.Runtime(config_text=CONFIG, log=self.on_log)\n"
            "    def on_log(self, level, message):\n"
            "        pass\n"
            "owner = Owner()\n"
            "rt = owner.rt\n"
            "keys = rt.key_chain(list(range(16)))\n"
            "rt.host_block_write(0, bytes(8192))\n"
            "assert rt.save(keys, [0]).wait() == kvtier.OK\n"
            "gc.disable()\n"
            "go = threading.Event()\n"
            "def on_layer(layer):\n"
            "    go.wait(5)\n"
            "    if layer == 0:\n"
            "        gc.collect()\n"
            "load = rt.load(keys, [1], on_layer=on_layer)\n"
            "del rt, owner\n"
            "go.set()\n"
            "assert load.wait(timeout_s=10) == kvtier.OK\n"
        )
        self.run_script(script)

    def test_a_runtime_closed_from_its_own_callback_closes(self):
        # close() in an on_layer callback, on a worker of the runtime: it
        # used to run kvtier_close there, which joined the thread it ran on
        # (the process aborted). A separate process, as a failure ends it.
        script = (
            "import threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "keys = rt.key_chain(list(range(16)))\n"
            "rt.host_block_write(0, bytes(8192))\n"
            "assert rt.save(keys, [0]).wait() == kvtier.OK\n"
            "load = rt.load(keys, [1], on_layer=lambda layer: layer == 0 and rt.close())\n"
            "assert load.wait(timeout_s=10) == kvtier.OK\n"
            "try:\n"
            "    rt.stats()\n"
            "    raise SystemExit('still open')\n"
            "except kvtier.KvtierError as e:\n"
            "    assert 'runtime is closed' in e.message, e.message\n"
        )
        self.run_script(script)

    def test_a_fork_inside_a_callback_returns_from_the_call_in_the_child(self):
        # fork() in a done callback run at once, inside add_done_callback's
        # call: the child's copy of that call returns through its bookkeeping,
        # which the fork used to wipe (ValueError in the child).
        script = (
            "import os, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "keys = rt.key_chain(list(range(16)))\n"
            "c = rt.save(keys, [0])\n"
            "assert c.wait() == kvtier.OK\n"
            "pids = []\n"
            "c.add_done_callback(lambda: pids.append(os.fork()))\n"
            "if pids[0] == 0:\n"
            "    os._exit(0)\n"
            "_, status = os.waitpid(pids[0], 0)\n"
            "assert os.waitstatus_to_exitcode(status) == 0, status\n"
        )
        run = self.run_script(script)
        self.assertNotIn("Error", run.stderr)

    def test_an_orphaned_callback_may_hold_the_last_reference_to_a_completion(self):
        # c1 is freed while its load runs, so its callbacks wait for it to
        # end; the one callback holds the only reference to c2, which has
        # callbacks of its own. Dropping them used to end c2 under the lock
        # that ending c2 takes: the worker hung, and so did every later free.
        script = (
            "import threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "k1 = rt.key_chain(list(range(16)))\n"
            "k2 = rt.key_chain(list(range(100, 116)))\n"
            "k3 = rt.key_chain(list(range(200, 216)))\n"
            "assert rt.save(k1, [0]).wait() == kvtier.OK\n"
            "release = threading.Event()\n"
            "def make():\n"
            "    c1 = rt.load(k1, [2], on_layer=lambda layer: release.wait(5))\n"
            "    c2 = rt.save(k2, [1])\n"
            "    assert c2.wait() == kvtier.OK\n"
            "    c2.add_done_callback(lambda: None)\n"
            "    c1.add_done_callback(lambda: c2)\n"
            "    return c1\n"
            "c1 = make()\n"
            "c1.free()\n"
            "release.set()\n"
            "c3 = rt.save(k3, [3])\n"
            "assert c3.wait() == kvtier.OK\n"
            "c3.add_done_callback(lambda: None)\n"
            "c3.free()\n"
            "rt.close()\n"
        )
        self.run_script(script, timeout=30)

    def test_keys_are_a_sequence_that_pickles(self):
        # Keys sent from a scheduler process to a worker: the array's class is
        # made on the fly, and pickle could not find it by name.
        keys = self.rt.key_chain(list(range(5 * 16)))
        self.assertIsInstance(keys, collections.abc.Sequence)
        self.assertEqual(keys.index(keys[3]), 3)
        self.assertEqual(keys.count(keys[1]), 1)
        self.assertIn(keys[4], keys)
        self.assertEqual(list(reversed(keys)), list(keys)[::-1])
        for part in (keys, keys[1:4], keys[:0]):
            with self.subTest(len=len(part)):
                back = pickle.loads(pickle.dumps(part))
                self.assertIsInstance(back, kvtier.Keys)
                self.assertEqual(back, part)
        self.assertEqual(self.rt.save(keys[:2], [0, 1]).wait(), kvtier.OK)
        self.assertEqual(self.rt.lookup(pickle.loads(pickle.dumps(keys))), (2, [0, 0]))

    def test_keys_are_made_only_over_the_runtimes_arrays_and_within_them(self):
        keys = self.rt.key_chain(list(range(2 * 16)))
        self.assertEqual(kvtier.Keys(keys._array, 1, 1), keys[1:])
        self.assertEqual(kvtier.Keys(keys._array, 2), [])
        # C read `length` keys whatever the array held: past it, other memory
        # or a crash.
        for start, length in ((0, 10**7), (0, 3), (-1, 1), (3, None), (1, -1)):
            with self.subTest(start=start, length=length):
                with self.assertRaises(ValueError) as e:
                    kvtier.Keys(keys._array, start, length)
                self.assertIn("are not all in an array of 2 keys", str(e.exception))
        # A list of tuples used to fail only when read ("'tuple' object has no
        # attribute 'hi'"); calls take the list itself.
        with self.assertRaises(TypeError) as e:
            kvtier.Keys([(1, 2)])
        self.assertIn("pass a list of (hi, lo) tuples where keys go", str(e.exception))
        self.assertEqual(self.rt.lookup([(1, 2)]), (0, []))

    def test_a_loads_on_layer_cannot_wait_for_that_load(self):
        # The load ends after on_layer returns: results(), errors() or wait()
        # without a limit there waited forever, and close() after them.
        script = (
            "import math, threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "keys = rt.key_chain(list(range(32)))\n"
            "assert rt.save(keys, [0, 1]).wait() == kvtier.OK\n"
            "box, ready, seen = {}, threading.Event(), []\n"
            "def on_layer(layer):\n"
            "    ready.wait(5)\n"
            "    if layer:\n"
            "        return\n"
            "    load = box['load']\n"
            "    for call in (load.results, load.errors, load.wait, lambda: load.wait(math.inf)):\n"
            "        try:\n"
            "            call()\n"
            "            seen.append('returned')\n"
            "        except RuntimeError as e:\n"
            "            seen.append('on_layer' in str(e))\n"
            "    seen.append(load.wait(0))  # a poll answers at once\n"
            "box['load'] = rt.load(keys, [2, 3], on_layer=on_layer)\n"
            "ready.set()\n"
            "assert box['load'].wait(10) == kvtier.OK\n"
            "assert seen == [True, True, True, True, None], seen\n"
            "assert box['load'].results() == [(kvtier.OK, 8192)] * 2\n"
            "rt.close()\n"
        )
        self.run_script(script, timeout=30)

    def test_a_poll_loop_ends_once_the_work_ends_whatever_its_code(self):
        # wait(timeout) answered DEADLINE_EXCEEDED while the load ran and
        # also once its blocks had ended DEADLINE_EXCEEDED: a loop waiting
        # for the work to end could not tell the two apart.
        keys = self.rt.key_chain(list(range(1300, 1300 + 16)))
        self.assertEqual(self.rt.save(keys, [0]).wait(), kvtier.OK)
        release = threading.Event()
        running = self.rt.load(keys, [1], on_layer=lambda layer: release.wait(10))
        try:
            self.assertIsNone(running.wait(0.01))
            self.assertIsNone(running.wait(0))
        finally:
            release.set()
        self.assertEqual(self.poll(running), kvtier.OK)
        # Blocks of a lower tier, loaded with no time to read them, end
        # DEADLINE_EXCEEDED.
        two_tiers = CONFIG.replace("capacity: 1MiB", "capacity: 40KiB") + (
            "  - name: lower\n    type: host\n    capacity: 1MiB\n"
            "    hugepages: false\n    mlock: false\n")
        with kvtier.Runtime(config_text=two_tiers) as rt:
            old = rt.key_chain(list(range(1000, 1064)))
            self.assertEqual(rt.save(old, [0, 1, 2, 3]).wait(), kvtier.OK)
            for j in range(2):  # pushes `old` down to the lower tier
                newer = rt.key_chain(list(range(j * 64, j * 64 + 64)))
                self.assertEqual(rt.save(newer, [4, 5, 6, 7]).wait(), kvtier.OK)
            # Which of `old`'s blocks the hub keeps depends on when the mover
            # ran; the hub cannot keep them all, and one below takes a read.
            hits, tiers = rt.lookup(old)
            self.assertEqual(hits, 4)
            self.assertIn(1, tiers)
            late = rt.load(old, [8, 9, 10, 11], timeout_s=0)
            self.assertEqual(self.poll(late), kvtier.DEADLINE_EXCEEDED)
            self.assertTrue(late.done)
            self.assertIn((kvtier.DEADLINE_EXCEEDED, 0), late.results())
            self.assertEqual(late.wait(0.01), kvtier.DEADLINE_EXCEEDED)

    def test_a_forked_child_cannot_read_results_still_running_in_the_parent(self):
        # The child has no thread to finish the load: results() used to answer
        # each block INVALID_ARGUMENT ("the completion is not done yet").
        keys = self.rt.key_chain(list(range(1400, 1400 + 2 * 16)))
        self.assertEqual(self.rt.save(keys, [0, 1]).wait(), kvtier.OK)
        release = threading.Event()
        load = self.rt.load(keys, [2, 3], on_layer=lambda layer: release.wait(10))
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 2 if load.wait() != kvtier.UNAVAILABLE else 0
                for call in (load.results, load.errors):
                    try:
                        call()
                        code = 3
                    except kvtier.KvtierError as e:
                        if e.code != kvtier.UNAVAILABLE or "forked" not in e.message:
                            code = 4
            except BaseException:
                code = 9
            finally:
                os._exit(code)
        release.set()
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(load.results(), [(kvtier.OK, 8192)] * 2)

    def test_a_cancelled_wait_async_ends_quietly_after_its_loop_closed(self):
        # The load ends after asyncio.run closed the loop: its done callback
        # used to raise "Event loop is closed" inside ctypes, printed at exit.
        script = (
            "import asyncio, threading, kvtier\n"
            f"CONFIG = {CONFIG!r}\n"
            "rt = kvtier.Runtime(config_text=CONFIG)\n"
            "keys = rt.key_chain(list(range(32)))\n"
            "assert rt.save(keys, [0, 1]).wait() == kvtier.OK\n"
            "release = threading.Event()\n"
            "load = rt.load(keys, [2, 3], on_layer=lambda layer: release.wait(10))\n"
            "async def main():\n"
            "    try:\n"
            "        await asyncio.wait_for(load.wait_async(), 0.05)\n"
            "    except asyncio.TimeoutError:\n"
            "        print('timed out', flush=True)\n"
            "asyncio.run(main())\n"
            "release.set()\n"
            "assert load.wait(10) == kvtier.OK\n"
            "rt.close()\n"
        )
        run = self.run_script(script, timeout=30)
        self.assertEqual(run.stdout, "timed out\n")
        self.assertEqual(run.stderr, "")


if __name__ == "__main__":
    unittest.main()
