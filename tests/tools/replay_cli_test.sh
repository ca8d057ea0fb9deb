#!/usr/bin/env bash
# End-to-end check of the main job: kvtier-bench replays the shipped arXiv
# trace. With a hub that holds every block it must hit exactly the trace's
# infinite-cache count of full blocks (7468 of 19686); with a small hub it hits
# fewer; both with 0 verification failures and exit 0 (no load, save or lookup
# failure).
# Small blocks keep it quick under sanitizers.
# Usage: replay_cli_test.sh KVTIER_BENCH SOURCE_DIR
set -euo pipefail
bench="$1"
src="$2"
small_model=(--set model.layers=1 --set model.kv_heads=1 --set model.head_size=4)

field() {  # field NAME JSON -> the first integer value of "NAME" (top level)
  grep -o "\"$1\":[0-9]*" <<<"$2" | head -n 1 | cut -d: -f2
}

check() {  # check LABEL ACTUAL OP EXPECTED
  if ! [ "$2" "$3" "$4" ]; then
    echo "FAIL: $1: got $2, expected $3 $4" >&2
    exit 1
  fi
  echo "ok: $1 = $2"
}

run() {
  "$bench" replay --config "$src/config/examples/default.yaml" \
    --trace "$src/traces/mooncake_arxiv_trace_first1000.jsonl" "${small_model[@]}" --json "$@"
}

big=$(run --set tiers.host.capacity=256MiB)
check "blocks" "$(field blocks "$big")" -eq 19686
check "block_hits (large hub)" "$(field block_hits "$big")" -eq 7468
check "token_hits (large hub)" "$(field token_hits "$big")" -eq "$(field infinite_cache_token_hits "$big")"
check "verify_failures (large hub)" "$(field verify_failures "$big")" -eq 0

small=$(run --set tiers.host.capacity=8MiB)
check "block_hits (small hub)" "$(field block_hits "$small")" -lt 7468
check "block_hits (small hub) > 0" "$(field block_hits "$small")" -gt 0
check "verify_failures (small hub)" "$(field verify_failures "$small")" -eq 0

# A bad override is a usage error (exit 2) with the override named.
set +e
err=$("$bench" replay --config "$src/config/examples/default.yaml" --generate \
      --set tiers.nope.capacity=1GiB 2>&1 >/dev/null)
rc=$?
set -e
check "exit code for a bad --set" "$rc" -eq 2
grep -q "tiers.nope.capacity" <<<"$err" || { echo "FAIL: error does not name the override: $err" >&2; exit 1; }

# --timeout-ms is at most one day; -1 (which wraps) and larger are usage errors.
for bad in -1 86400001 18446744073709551615; do
  set +e
  err=$("$bench" replay --config "$src/config/examples/default.yaml" --generate \
        --timeout-ms "$bad" 2>&1 >/dev/null)
  rc=$?
  set -e
  check "exit code for --timeout-ms $bad" "$rc" -eq 2
  grep -q -- "--timeout-ms" <<<"$err" || { echo "FAIL: error does not name --timeout-ms: $err" >&2; exit 1; }
done

# --limit takes a whole number: -1 (which wrapped) and past 2^64 (which
# saturated) replayed every request with exit 0.
for bad in -1 18446744073709551616 12x; do
  set +e
  err=$("$bench" replay --config "$src/config/examples/default.yaml" --generate \
        --limit "$bad" 2>&1 >/dev/null)
  rc=$?
  set -e
  check "exit code for --limit $bad" "$rc" -eq 2
  grep -q -- "--limit" <<<"$err" || { echo "FAIL: error does not name --limit: $err" >&2; exit 1; }
done

# sweep's and host's whole numbers take it too: 0x3 and +3 ran as 3, '' as 0.
tiny="$src/traces/tiny.jsonl"
for args in "sweep --trace $tiny --points 1:0 --policies lru --limit 0x3" \
            "sweep --trace $tiny --points 1:0 --policies lru --gpu-pool-blocks +2" \
            "host --rounds 0x2" "host --queue-depth -1"; do
  set +e
  # shellcheck disable=SC2086 # the words of $args are the arguments
  err=$("$bench" $args 2>&1 >/dev/null)
  rc=$?
  set -e
  check "exit code for $args" "$rc" -eq 2
  grep -q -- "is not a whole number" <<<"$err" || { echo "FAIL: $args: $err" >&2; exit 1; }
done

# growth's sizes take the same check: -1 was read as 2^64 - 1 and refused
# as "at most 2^23", not as the negative number it is.
for flag in --blocks --blocks-per-request; do
  set +e
  err=$("$bench" growth "$flag" -1 2>&1 >/dev/null)
  rc=$?
  set -e
  check "exit code for growth $flag -1" "$rc" -eq 2
  grep -q -- "'-1' is not a whole number" <<<"$err" || { echo "FAIL: growth $flag -1: $err" >&2; exit 1; }
done

# Keys the hub's admission refuses end OK with 0 bytes: "saved" counts the
# bytes written, not every OK key times the block size.
refusing=$(run --set "tiers.host.admission=[frequency]")
check "bytes_saved (refusing hub) = host bytes written" "$(field bytes_saved "$refusing")" -eq \
  "$(grep -o '"bytes_written":[0-9]*' <<<"$refusing" | head -n 1 | cut -d: -f2)"
# SIGINT stops a long replay after its request in progress: exit 130, the
# report says so, and the runtime shut down (its admin socket file is gone).
# The socket's path is taken as given, not read as YAML (" #" would start a
# comment there).
tmp=$(mktemp -d)
sock="$tmp/a #\"1\\.sock"
"$bench" replay --config "$src/config/examples/default.yaml" "${small_model[@]}" \
  --gen sessions=4000,steps=100 --admin-socket "$sock" >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "FAIL: the replay never opened its admin socket at $sock:" >&2; ls "$tmp" >&2; exit 1; }
kill -INT "$pid"
set +e
wait "$pid"
rc=$?
set -e
check "exit code after SIGINT" "$rc" -eq 130
grep -q "^interrupted:    by signal 2 after" "$tmp/out" || { echo "FAIL: no interrupted line:" >&2; cat "$tmp/out" >&2; exit 1; }
check "admin socket left after SIGINT" "$(ls "$tmp" | grep -c sock || true)" -eq 0
rm -rf "$tmp"
echo "replay_cli_test: all checks passed"
