#!/usr/bin/env bash
# Instructions per request of each pair of `examples/https_overhead` (ours, then the plain
# client it wraps), counted with valgrind's callgrind: what the rps ratio would be if the
# machine did nothing else, the same number every run. The rps figures swing by several
# percent from one process to the next on a shared machine (BENCHMARKS.md, "HTTPS
# clients"); this is the figure they are read against.
#
#   benches/https_instructions.sh [PAIR ...]     e.g. benches/https_instructions.sh tonic
#
# Each variant runs alone (`--variants`) in one process, at two run lengths; the
# difference of callgrind's totals over the difference of the requests sent is its
# instructions per request, so set-up (certificates, stores, handshakes, warm-up) cancels
# out: one request at a time (so one connection, for HTTP/1.1 too), the warm-up the same
# at both lengths, and a pair of runs whose connections still differ in number (each TLS
# handshake is millions of instructions) measured again.
# Client and server are in the one process, so a request's count holds the server's
# side too (the same for both). Prints per pair
#
#   https client=<name> instructions_ours=<n> instructions_plain=<n> ratio_vs_plain=<plain/ours> connections=<ours>,<plain>
#
# and for reqwest, the same against a `ClientWithMiddleware` with no middleware
# (`instructions_middleware_alone`, `ratio_vs_middleware_alone`).
set -euo pipefail
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cd "$(git rev-parse --show-toplevel)"
bin=$(cargo build --release -p bearer-reload-examples --example https_overhead \
    --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "https_overhead" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "the example did not build" >&2; exit 1; }
pairs=${*:-hyper-util-h1 hyper-util-h2 reqwest tonic}

# "requests instructions connections" of variant $2 of pair $1 in one run of $3 ms.
run() {
    local out
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" --only "$1" \
        --processes 1 --variants "$2" --rounds 1 --run-ms "$3" --warmup-ms 300 --concurrency 1 --verbose 2>&1)
    local requests instructions connections
    requests=$(echo "$out" | sed -n 's/.*requests sent (warm-up included): \[\(.*\)\].*/\1/p' |
        tr -d ' ' | tr ',' '+' | bc)
    instructions=$(echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    # Made at warm-up, and any made during the rounds.
    connections=$(echo "$out" | sed -n 's/.* connections=\[\([0-9, ]*\)\].*/\1/p' |
        tr -d ' ' | tr ',' '+' | bc)
    during=$(echo "$out" | sed -n 's/.*: \([0-9]*\) connections made during the rounds.*/\1/p')
    [ -n "$requests" ] && [ -n "$instructions" ] && [ -n "$connections" ] ||
        { echo "$out" >&2; exit 1; }
    echo "$requests $instructions $((connections + ${during:-0}))"
}

# "instructions-per-request connections" of variant $2 of pair $1.
per_request() {
    local pair=$1 variant=$2 short long
    for _ in 1 2 3 4 5; do
        short=$(run "$pair" "$variant" 300)
        long=$(run "$pair" "$variant" 2500)
        set -- $short $long
        if [ "$3" = "$6" ]; then
            echo "$(( ($5 - $2) / ($4 - $1) )) $3"
            return
        fi
    done
    echo "pair $pair variant $variant: the runs kept making different numbers of connections" >&2
    exit 1
}

for pair in $pairs; do
    set -- $(per_request "$pair" 0) $(per_request "$pair" 1)
    ratio=$(python3 -c "print(f'{$3 / $1:.3f}')")
    line="https client=$pair instructions_ours=$1 instructions_plain=$3 ratio_vs_plain=$ratio connections=$2,$4"
    if [ "$pair" = reqwest ]; then
        # reqwest-middleware's `ClientWithMiddleware` with no middleware, over the plain
        # client: what any middleware sits in.
        bare=$(per_request "$pair" 2)
        set -- $1 ${bare%% *}
        line="$line instructions_middleware_alone=$2 ratio_vs_middleware_alone=$(python3 -c "print(f'{$2 / $1:.3f}')")"
    fi
    echo "$line"
done
