#!/usr/bin/env python3
"""The v3 run's time estimate (theory/phase-lab.md §9.9, 2026-12-06 10:30 UTC): minutes on
two shards per arm of §9.8's list, cumulative, from three measurements on the final code,
all committed under theory/v3-probes/cost/:

- train-bench-60.txt: `scripts/v3_cost_bench.py 60` (median step of each arm's config, one
  process, quiet machine);
- analysis-seconds.txt: the run's analyses at the plan's lab settings, timed by hand on the
  T4 probe models of full, w8s4 and w8s8 (commands in the file);
- the T4 probe units' training stages (two shards at once): full 132-143 s, w8s4 183 s,
  w8s8 131 s per 3 000 steps, which give the contention factors below.

w12s12 is counted at §9.4's cap (five recipes): a probe seed (100) held 55.4 % after 3 000
steps, 74.4 % after 6 000, 82.9 % after 9 000, 88.1 % after 12 000 and
97.5 % after 15 000 (w12s12-probe.log).

Usage: scripts/v3_cost.py [theory/v3-probes/cost]
"""
import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1] if len(sys.argv) > 1 else "theory/v3-probes/cost")
ROOT = Path(__file__).resolve().parent.parent
STEPS = 3000
# Two shards at once against one process alone: full 142 / 143 s, w8s4 183 / 150 s,
# w8s8 131 / 113 s (probe unit / bench x 3 000); 1.2 for every compressed arm, as w8s4.
CONTENTION_FULL, CONTENTION = 1.0, 1.2
ANALYSIS_CONTENTION = 1.15
CAP_RECIPES = 5


def main():
    plan = json.loads((ROOT / "plans/v3.json").read_text())
    arms = plan["arms"] + (plan.get("cut") or {}).get("arms", [])
    step = {}
    for line in (HERE / "train-bench-60.txt").read_text().splitlines():
        name, rest = line.split(" ", 1)
        step[name] = json.loads(rest)["median_s"]
    secs = {}
    for line in (HERE / "analysis-seconds.txt").read_text().splitlines():
        if "|" not in line:
            continue
        model, command, s = (x.strip() for x in line.split("|"))
        secs.setdefault(model, 0.0)
        secs[model] += float(s.split()[0])
    cum = 0.0
    print("| arm | seeds | train s | analyses s | recipes | shard min | cumulative wall min (2 shards) |")
    print("|---|---|---|---|---|---|---|")
    for a in arms:
        n = a["name"]
        seeds = len(a.get("seeds", plan["seeds"]))
        if n == "full":
            train = step[n] * STEPS * CONTENTION_FULL
            an = secs["full"] * ANALYSIS_CONTENTION
        else:
            train = step[n] * STEPS * CONTENTION
            # w8s4's analyses scaled by the arm's step cost; w8s8's own (it also cycles).
            base = "w8s8" if n == "w8s8" else "w8s4"
            an = secs[base] * (step[n] / step[base]) * ANALYSIS_CONTENTION
        recipes = CAP_RECIPES if n == "w12s12" else 1
        shard_min = (train * recipes + an) * seeds / 60
        cum += shard_min / 2
        print(f"| {n} | {seeds} | {train:.0f} | {an:.0f} | {recipes} | {shard_min:.1f} | {cum:.1f} |")


if __name__ == "__main__":
    main()
