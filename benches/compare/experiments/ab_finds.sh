#!/bin/bash
# Two builds of `route_steps.rs` (see its header: a binary crate each, one against each
# checkout), run in turn, each run `FINDS=1 W=$W R=5` on a trace; prints the medians over
# the runs' last three rounds of each build's cold and hot find p50 and p99 (ns), and the
# median of the per-round ratios B / A. Used for the active set's figures in
# `docs/benchmarks.md` ("Targets and where they are missed").
#
#   benches/compare/experiments/ab_finds.sh A/target/release/route_steps \
#       B/target/release/route_steps TRACE [RUNS=16] [W=16]
set -eu
a=$1 b=$2 trace=$3 runs=${4:-16} w=${5:-16}
uptime
for _ in $(seq "$runs"); do
    for build in A B; do
        bin=$a; [ "$build" = B ] && bin=$b
        FINDS=1 W=$w R=5 "$bin" "$trace" |
            awk -v b=$build '/^round/{r=$2} /finds:/{ if (r!="0:" && r!="1:") print b, $4, $6, $10, $12 }'
    done
done | python3 -c '
import statistics as st, sys
rows = {"A": [], "B": []}
for line in sys.stdin:
    p = line.split()
    rows[p[0]].append([float(x) for x in p[1:]])
names = ["cold p50", "cold p99", "hot p50", "hot p99"]
for build, r in rows.items():
    print(build, len(r), "rounds:", ", ".join(f"{n} {st.median(x[i] for x in r):.0f}" for i, n in enumerate(names)))
a, b = rows["A"], rows["B"]
print("B / A, median of per-round ratios:", ", ".join(
    f"{n} {st.median(y[i] / x[i] for x, y in zip(a, b)):.3f}" for i, n in enumerate(names)))
'
uptime
