"""An engine's loop in Python over the kvtier binding, driven by a Mooncake trace.

Each request's full blocks are named by the trace's hash ids (as an engine names
blocks by its own block hashes; a prompt's partial last block has no hash and is
always computed), looked up and pinned, loaded into the host
stand-in engine and checked byte for byte, the rest "prefilled" with bytes
derived from their keys and saved, and the request reported finished with its
output length: the calls a Python serving engine makes, in the order it makes
them. One request at a time, so every request's blocks fit the engine pool.

Hybrid models (runtime.state_blocks > 0): a request resumes only from the state
checkpoint at the end of its hits (load_state, checked byte for byte; a failed
or wrong part means recomputing the prompt), and after its save the state at
each block it computed is offered with save_state (the host tier's admission
keeps some).

    KVTIER_LIBRARY=build/libkvtier.so PYTHONPATH=python \\
        python3 python/examples/replay_trace.py [--config FILE] [--trace FILE] \\
        [--limit N] [--set path=value ...] [--check-infinite]

Prints the block hits next to an infinite cache's (leading full blocks seen in
any earlier request). Exits 1 if a loaded block had wrong bytes or a call failed,
and with --check-infinite (for a config whose tiers hold every block) also if
the hits differ from the infinite cache's.
"""

import argparse
import json
import os
import sys
import time

import kvtier

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def content(key, block_bytes):
    """The bytes the engine "computes" for a block: its key, repeated."""
    unit = key[0].to_bytes(8, "little") + key[1].to_bytes(8, "little")
    return (unit * (block_bytes // 16 + 1))[:block_bytes]


def state_content(key, part, block_bytes):
    """The bytes of part `part` of the state checkpoint at the end of `key`."""
    return content((key[0] ^ ((part + 1) * 0x9E3779B97F4A7C15 % (1 << 64)), key[1]), block_bytes)


def resume_state(rt, boundary, pages, block_bytes, totals):
    """Loads and checks the checkpoint of `boundary`; True when all of it came back."""
    load = rt.load_state(boundary, pages, timeout_s=5)
    for i, (code, _) in enumerate(load.results()):
        if code != kvtier.OK:
            return False
        if rt.host_block_read(pages[i]) != state_content(boundary, i, block_bytes):
            totals["verify_failures"] += 1
            return False
    return True


def offer_states(rt, boundaries, pages, block_bytes, totals):
    """Offers the state at the end of each of `boundaries` as its checkpoint."""
    for boundary in boundaries:
        for i, page in enumerate(pages):
            rt.host_block_write(page, state_content(boundary, i, block_bytes))
        if rt.save_state(boundary, pages).wait() != kvtier.OK:
            totals["failed_calls"] += 1


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def read_trace(path, limit):
    with open(path) as f:
        for i, line in enumerate(f):
            if limit and i >= limit:
                return
            if line.strip():
                yield json.loads(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "config/examples/default.yaml"))
    parser.add_argument("--trace",
                        default=os.path.join(ROOT, "traces/mooncake_arxiv_trace_first1000.jsonl"))
    parser.add_argument("--limit", type=int, default=0, help="requests to replay; 0 = all")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        metavar="PATH=VALUE", help="config override, as kvtier-bench --set")
    parser.add_argument("--block-tokens", type=positive_int, default=512, metavar="N",
                        help="tokens per trace block (Mooncake traces: 512)")
    parser.add_argument("--check-infinite", action="store_true")
    args = parser.parse_args()

    seen = set()  # hash ids of earlier requests: the infinite cache
    totals = {"requests": 0, "blocks": 0, "hits": 0, "infinite": 0, "skipped": 0,
              "verify_failures": 0, "failed_calls": 0}
    start = time.perf_counter()
    with kvtier.Runtime(config_path=args.config, overrides=args.overrides) as rt:
        pool_blocks = rt.engine_blocks
        block_bytes = rt.block_bytes
        state_blocks = rt.state_blocks
        for request_id, req in enumerate(read_trace(args.trace, args.limit), start=1):
            ids = req["hash_ids"]
            if len(ids) + state_blocks > pool_blocks:
                totals["skipped"] += 1
                continue
            full = ids[:req["input_length"] // args.block_tokens]
            keys = rt.keys_from_engine_hashes([i.to_bytes(8, "little") for i in full])
            infinite = 0
            while infinite < len(full) and full[infinite] in seen:
                infinite += 1
            seen.update(full)
            blocks = list(range(len(keys)))  # one request at a time: the pool is ours
            state_pages = list(range(len(keys), len(keys) + state_blocks))

            with rt.lookup_and_pin(keys, request_id=request_id) as pin:
                hits = 0
                if pin.hit_blocks:
                    load = rt.load(keys[:pin.hit_blocks], blocks[:pin.hit_blocks], timeout_s=5)
                    for i, (code, _) in enumerate(load.results()):
                        if code != kvtier.OK:
                            break  # a failed block and those after it are recomputed
                        if rt.host_block_read(blocks[i]) != content(keys[i], block_bytes):
                            totals["verify_failures"] += 1
                            break
                        hits += 1
                if state_blocks and hits and (
                        hits < pin.hit_blocks or
                        not resume_state(rt, keys[hits - 1], state_pages, block_bytes, totals)):
                    hits = 0  # no state to resume from: the whole prompt is computed
                for i in range(hits, len(keys)):  # prefill what was not loaded
                    rt.host_block_write(blocks[i], content(keys[i], block_bytes))
                if hits < len(keys):
                    save = rt.save(keys[hits:], blocks[hits:],
                                   parent=keys[hits - 1] if hits else None)
                    if save.wait() != kvtier.OK:
                        totals["failed_calls"] += 1
                    if state_blocks:
                        offer_states(rt, keys[hits:], state_pages, block_bytes, totals)
            rt.request_finished(keys, req.get("output_length", 0))
            totals["requests"] += 1
            totals["blocks"] += len(ids)
            totals["hits"] += hits
            totals["infinite"] += infinite
        stats = rt.stats()
    elapsed = time.perf_counter() - start

    print(f"replayed {totals['requests']} requests ({totals['skipped']} larger than the pool "
          f"skipped) of {args.trace} on {args.config} in {elapsed:.2f} s")
    print(f"block hits {totals['hits']} of {totals['blocks']} "
          f"(infinite cache: {totals['infinite']}); verify failures "
          f"{totals['verify_failures']}; failed saves {totals['failed_calls']}; "
          f"runtime saved_blocks {stats['saved_blocks']}")
    bad = totals["verify_failures"] or totals["failed_calls"]
    if args.check_infinite and totals["hits"] != totals["infinite"]:
        print("check failed: the hits differ from the infinite cache's", file=sys.stderr)
        bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
