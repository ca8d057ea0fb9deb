"""What the Python binding costs per call, next to the bare C call.

For lookups of N stored keys it times, per call:
  c_call  kvtier_lookup through ctypes with every argument built beforehand
          (the floor for any ctypes binding: the C work plus one foreign call);
  Keys    Runtime.lookup(keys) with the Keys that key_chain returned;
  tuples  Runtime.lookup(list of (hi, lo) tuples), converted at each call;
key_chain over N blocks of tokens from a list and from array('i'), and keys
from N engine hashes in one keys_from_engine_hashes call and one
key_from_engine_hash call each. Prints microseconds per call and each one's
ratio to c_call (or to the array('i') form, or to the one batched call).

    KVTIER_LIBRARY=build/libkvtier.so python3 python/bench_binding.py [--calls 2000]
"""

import argparse
import array
import ctypes
import time

import kvtier

BLOCK_TOKENS = 16
CONFIG = f"""
model:
  preset: tiny
  block_tokens: {BLOCK_TOKENS}
engine:
  pool_blocks: 64
tiers:
  - name: host
    type: host
    capacity: 64MiB
    hugepages: false
    mlock: false
"""


def per_call_us(fn, calls):
    fn()  # warm
    best = float("inf")
    for _ in range(3):  # best of three rounds
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def save_all(rt, keys):
    """Saves keys in chains of 64 engine blocks, each continuing the last."""
    for b in range(64):
        rt.host_block_write(b, bytes([b]) * rt.block_bytes)
    for start in range(0, len(keys), 64):
        part = keys[start:start + 64]
        parent = keys[start - 1] if start else None
        code = rt.save(part, list(range(len(part))), parent=parent).wait()
        assert code == kvtier.OK, kvtier.code_name(code)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    lib = kvtier.load_library()
    print(f"kvtier {kvtier.version()}, block of {BLOCK_TOKENS} tokens, host tier only, "
          f"best of 3 rounds of {args.calls} calls")
    print(f"{'op':<10}{'keys':>6}{'c_call us':>11}{'Keys us':>10}{'tuples us':>11}"
          f"{'Keys/c':>8}{'tuples/c':>10}")
    with kvtier.Runtime(config_text=CONFIG) as rt:
        tokens = list(range(2048 * BLOCK_TOKENS))
        all_keys = rt.key_chain(tokens)
        save_all(rt, all_keys)
        for n in (16, 256, 2048):
            keys = all_keys[:n]
            tuples = list(keys)
            assert rt.lookup(keys)[0] == n
            c_keys = keys._pointer()
            hits = ctypes.c_size_t(0)
            tiers = ctypes.create_string_buffer(n)

            def c_call():
                lib.kvtier_lookup(rt._rt, c_keys, n, None, ctypes.byref(hits), tiers)

            c = per_call_us(c_call, args.calls)
            k = per_call_us(lambda: rt.lookup(keys), args.calls)
            t = per_call_us(lambda: rt.lookup(tuples), max(args.calls // 10, 10))
            print(f"{'lookup':<10}{n:>6}{c:>11.2f}{k:>10.2f}{t:>11.2f}{k / c:>8.2f}{t / c:>10.2f}")
        print(f"{'op':<10}{'blocks':>6}{'array us':>11}{'list us':>10}{'list/array':>12}")
        for n in (16, 256, 2048):
            as_list = tokens[:n * BLOCK_TOKENS]
            as_array = array.array("i", as_list)
            a = per_call_us(lambda: rt.key_chain(as_array), max(args.calls // 10, 10))
            b = per_call_us(lambda: rt.key_chain(as_list), max(args.calls // 10, 10))
            print(f"{'key_chain':<10}{n:>6}{a:>11.2f}{b:>10.2f}{b / a:>12.2f}")
        print(f"{'op':<16}{'blocks':>6}{'batch us':>10}{'one by one us':>15}{'one/batch':>11}")
        for n in (16, 256, 2048):
            hashes = [i.to_bytes(8, "little") for i in range(n)]

            def one_by_one():
                keys = []
                for h in hashes:
                    keys.append(rt.key_from_engine_hash(h, parent=keys[-1] if keys else None))

            a = per_call_us(lambda: rt.keys_from_engine_hashes(hashes), max(args.calls // 10, 10))
            b = per_call_us(one_by_one, max(args.calls // 100, 5))
            print(f"{'engine hashes':<16}{n:>6}{a:>10.2f}{b:>15.2f}{b / a:>11.2f}")


if __name__ == "__main__":
    main()
