#!/usr/bin/env bash
# A/B of the request path: builds the `per_request` divan bench at a base commit and in
# the work tree, then runs the two binaries in turn, N rounds (default 4), and prints each
# round's medians of `bearer_layer` and `tower_http_static` (ns per request, both header
# shapes), ours/static, and ours against the base's ours. Method: BENCHMARKS.md, "A/B".
#
#   benches/ab.sh BASE [ROUNDS]        e.g. benches/ab.sh e16f811 6
#
# The base is built in a git worktree outside the repository ($AB_DIR, default
# ${TMPDIR:-/tmp}/bearer-reload-ab: inside, cargo would take it for a workspace member),
# with its own target directory, so the work tree's build is untouched; the same
# toolchain builds both.
set -euo pipefail
base=${1:?usage: benches/ab.sh BASE [ROUNDS]}
rounds=${2:-4}
top=$(git rev-parse --show-toplevel)
cd "$top"
export K8S_OPENAPI_ENABLED_VERSION=${K8S_OPENAPI_ENABLED_VERSION:-1.37}
work_dir=${AB_DIR:-${TMPDIR:-/tmp}/bearer-reload-ab}
mkdir -p "$work_dir"

# The executable `cargo bench --bench per_request --no-run` builds in `dir`.
build() {
    local dir=$1 target=$2
    (cd "$dir" && CARGO_TARGET_DIR=$target cargo bench --bench per_request --no-run \
        --message-format=json 2>/dev/null) |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "per_request" and m.get("executable"):
        print(m["executable"])'
}

base_sha=$(git rev-parse --short "$base")
base_tree="$work_dir/$base_sha"
if [ ! -d "$base_tree" ]; then
    git worktree add --detach "$base_tree" "$base" >/dev/null
fi
echo "building $base_sha (base) and the work tree ..." >&2
base_bin=$(build "$base_tree" "$work_dir/target-base")
work_bin=$(build "$top" "$top/target")
[ -n "$base_bin" ] && [ -n "$work_bin" ] || { echo "a build failed" >&2; exit 1; }

# Medians of the two variants from one run: "ours_one static_one ours_empty static_empty".
medians() {
    "$1" --bench bearer_layer tower_http_static 2>/dev/null | python3 -c '
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
        cols = [c.strip() for c in m.group(2).split("│")]
        value, unit = cols[2].split()
        got[(group, m.group(1))] = float(value) * units[unit]
print(" ".join("%.1f" % got[(g, s)] for s in ("One", "Empty") for g in ("bearer_layer", "tower_http_static")))'
}

printf "%-5s %-6s %10s %10s %9s %10s %10s %9s\n" round build ours_one static_one ratio_one ours_empty static_empty ratio_empty
for round in $(seq 1 "$rounds"); do
    for which in base work; do
        bin=$base_bin; [ "$which" = work ] && bin=$work_bin
        read -r o1 s1 oe se <<<"$(medians "$bin")"
        printf "%-5s %-6s %10s %10s %9.3f %10s %10s %9.3f\n" "$round" "$which" "$o1" "$s1" \
            "$(python3 -c "print($o1/$s1)")" "$oe" "$se" "$(python3 -c "print($oe/$se)")"
        eval "${which}_one+=\" $o1\"; ${which}_empty+=\" $oe\"; ${which}_r1+=\" $(python3 -c "print($o1/$s1)")\""
    done
done
python3 - "$base_one" "$work_one" "$base_empty" "$work_empty" "$base_r1" "$work_r1" <<'PY'
import statistics, sys
b1, w1, be, we, br, wr = ([float(x) for x in a.split()] for a in sys.argv[1:])
m = statistics.median
print(f"median ours/static (One): base {m(br):.3f}, work {m(wr):.3f}")
print(f"median ours, work/base: One {m(w1)/m(b1):.3f}, Empty {m(we)/m(be):.3f}")
worst = max(w / b for w, b in zip(w1, b1))
print(f"worst round, work/base (One): {worst:.3f}")
PY
