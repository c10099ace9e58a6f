#!/usr/bin/env bash
# A/B of the request path: builds the A/B harness (`benches/ab/`: the `per_request`
# bench's `bearer_layer` and `tower_http_static`, and `retry_unauthorized`) against a base
# commit and against the work tree, then runs the two binaries in turn, N rounds (default
# 4), and prints each round's medians (ns per request, one header and an empty header map)
# of `bearer_layer` and `tower_http_static`, ours/static, and at the end the medians of both
# builds and the worst round. Method: BENCHMARKS.md, "A/B".
#
#   benches/ab.sh BASE [ROUNDS]        e.g. benches/ab.sh e16f811 6
#   benches/ab.sh --instructions BASE  instructions per request instead (callgrind)
#
# Timings on a shared 2-core machine swing by 30% from one run of a binary to the next.
# `--instructions` counts instead, with valgrind's callgrind, what each variant executes per
# request (the bench run at two sample counts, the difference over the requests added, so
# that set-up and warm-up cancel out): the same number every run, for the request path's
# code, though not its memory stalls. It counts `retry_unauthorized` too
# (`BearerLayer::retry_unauthorized()`, the layer of the README's examples), in a second table.
#
# The base is checked out in a git worktree outside the repository ($AB_DIR, default
# ${TMPDIR:-/tmp}/bearer-reload-ab), and the harness (this tree's, the same code for both)
# is built against it there, with its own target directory. Only the store's
# construction follows the base's API (`--cfg ab_api="loader"` before
# `TokenStore::builder`).
set -euo pipefail
count=
if [ "${1:-}" = --instructions ]; then
    count=1
    shift
    command -v valgrind >/dev/null || { echo "--instructions needs valgrind (apt-get install valgrind)" >&2; exit 1; }
fi
base=${1:?usage: benches/ab.sh [--instructions] BASE [ROUNDS]}
rounds=${2:-4}
top=$(git rev-parse --show-toplevel)
cd "$top"
work_dir=${AB_DIR:-${TMPDIR:-/tmp}/bearer-reload-ab}
mkdir -p "$work_dir"

# Builds the harness in `harness` against the crate at `tree`; prints the executable.
build() {
    local harness=$1 tree=$2 target=$3 cfg=""
    grep -q 'pub fn builder(source: impl TokenSource)' "$tree"/src/*.rs "$tree"/src/*/*.rs 2>/dev/null ||
        cfg='--cfg ab_api="loader"'
    sed -i "s|^bearer-reload = { path = \"[^\"]*\" }|bearer-reload = { path = \"$tree\" }|" \
        "$harness/ab/Cargo.toml"
    (cd "$harness/ab" && RUSTFLAGS="${RUSTFLAGS:-} $cfg" CARGO_TARGET_DIR=$target \
        cargo bench --bench ab --no-run --message-format=json 2>/dev/null) |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "ab" and m.get("executable"):
        print(m["executable"])'
}

# A copy of this tree's harness (benches/ab and the benches/common it includes).
harness_copy() {
    local dest=$1
    rm -rf "$dest"
    mkdir -p "$dest"
    cp -r "$top/benches/ab" "$top/benches/common" "$dest/"
    rm -rf "$dest/ab/target"
}

base_sha=$(git rev-parse --short "$base")
base_tree="$work_dir/$base_sha"
[ -d "$base_tree" ] || git worktree add --detach "$base_tree" "$base" >/dev/null
echo "building the harness against $base_sha (base) and the work tree ..." >&2
harness_copy "$work_dir/harness-base"
harness_copy "$work_dir/harness-work"
base_bin=$(build "$work_dir/harness-base" "$base_tree" "$work_dir/target-base")
work_bin=$(build "$work_dir/harness-work" "$top" "$work_dir/target-work")
[ -n "$base_bin" ] && [ -n "$work_bin" ] || { echo "a build failed" >&2; exit 1; }

# Instructions per request of one variant (both header shapes): callgrind's total at 300
# and at 100 samples of 64 requests per shape, the difference over the 25,600 requests added.
instructions() {
    local bin=$1 variant=$2 totals=""
    for n in 100 300; do
        totals="$totals $(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            "$bin" --bench "$variant" --sample-count "$n" 2>&1 >/dev/null |
            sed -n 's/.*Collected : \([0-9]*\).*/\1/p')"
    done
    echo "$totals" | awk '{ printf "%.1f", ($2 - $1) / 25600 }'
}

if [ -n "$count" ]; then
    printf "%-5s %14s %14s %10s\n" build ours static ours-static
    for which in base work; do
        bin=$base_bin
        [ "$which" = work ] && bin=$work_bin
        ours=$(instructions "$bin" bearer_layer)
        stat=$(instructions "$bin" tower_http_static)
        printf "%-5s %14s %14s %+10.1f\n" "$which" "$ours" "$stat" "$(awk "BEGIN { print $ours - $stat }")"
        eval "extra_$which=$(awk "BEGIN { print $ours - $stat }")"
        eval "static_$which=$stat"
    done
    # The static layer's code is the same in both builds; what its count moves by is the
    # set-up's (the allocator's state), so the request path's change is ours-static's.
    printf "ours-static, work - base: %+.1f instructions per request\n" \
        "$(awk "BEGIN { print $extra_work - $extra_base }")"
    # The same for `BearerLayer::retry_unauthorized()` (a `Full<Bytes>` body, answered 200),
    # against the static layer's counts above.
    printf "%-5s %14s %14s %12s\n" build retry static retry-static
    for which in base work; do
        bin=$base_bin
        [ "$which" = work ] && bin=$work_bin
        retry=$(instructions "$bin" retry_unauthorized)
        eval "stat=\$static_$which"
        printf "%-5s %14s %14s %+12.1f\n" "$which" "$retry" "$stat" "$(awk "BEGIN { print $retry - $stat }")"
        eval "retry_extra_$which=$(awk "BEGIN { print $retry - $stat }")"
    done
    printf "retry-static, work - base: %+.1f instructions per request\n" \
        "$(awk "BEGIN { print $retry_extra_work - $retry_extra_base }")"
    exit 0
fi

# Medians of one run: "ours_one static_one ours_empty static_empty", in ns.
medians() {
    "$1" --bench --skip retry_unauthorized 2>/dev/null | python3 -c '
import re, sys
units = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}
group, got = None, {}
for line in sys.stdin:
    m = re.match(r"^\W*(bearer_layer|tower_http_static)\b", line)
    if m:
        group = m.group(1)
        continue
    m = re.match(r"^\W*(One|Empty)\s+(.*)$", line)
    if group and m:
        value, unit = m.group(2).split("│")[2].split()
        got[(group, m.group(1))] = float(value) * units[unit]
print(" ".join("%.1f" % got[(g, s)] for s in ("One", "Empty") for g in ("bearer_layer", "tower_http_static")))'
}

results=$(mktemp)
printf "%-5s %-5s %9s %10s %9s %10s %12s %11s\n" round build ours_one static_one ratio_one ours_empty static_empty ratio_empty
for round in $(seq 1 "$rounds"); do
    for which in base work; do
        bin=$base_bin
        [ "$which" = work ] && bin=$work_bin
        read -r o1 s1 oe se <<<"$(medians "$bin")"
        echo "$round $which $o1 $s1 $oe $se" >>"$results"
        python3 -c "print('%-5s %-5s %9s %10s %9.3f %10s %12s %11.3f' % ('$round', '$which', $o1, $s1, $o1 / $s1, $oe, $se, $oe / $se))"
    done
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = {w: [tuple(map(float, r[2:])) for r in rows if r[1] == w] for w in ("base", "work")}
m = statistics.median
for w in ("base", "work"):
    one = m(o / s for o, s, _, _ in by[w])
    empty = m(o / s for _, _, o, s in by[w])
    print(f"{w}: median ours/static one={one:.3f} empty={empty:.3f}")
worst = max(max(w[0] / b[0], w[2] / b[2]) for w, b in zip(by["work"], by["base"]))
print(f"worst round, ours work/base: {worst:.3f}")
PY
rm -f "$results"
