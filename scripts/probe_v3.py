#!/usr/bin/env python3
"""The task rule of theory/phase-lab.md §9.3 for one candidate (issue 45).

Usage: python3 scripts/probe_v3.py PROBE_DIR

PROBE_DIR is what `scripts/probe_v3.sh` writes: a `phasekv reproduce` output of one of
`plans/probes-v3/<candidate>.json` (runs/full-seed100..102, runs/w8s4-seed100,
runs/w8s8-seed100, with the plan) and `exports/<protocol>.jsonl`, the evaluated prompts from
`phasekv audit export --beyond D`.

§9.3 lets the rule read accuracies beyond the floor and the guarantees only, never a phase
statistic. This script reads and prints only:

1. each full-attention seed's held-out exact match after §9.4's training rule
   (`metrics.json`, `final_eval.accuracy`, at most MAX_EXTENSIONS_V3 extensions) against
   PROBE_FULL_MIN_ACCURACY;
2. for w8s4 and w8s8 (seed 100), the mean accuracy of the scored families under each protocol
   (the share of `correct` in `eval-<protocol>-outcomes.jsonl`, every line of which lies beyond
   the floor) against PROBE_V3_CEILING: the condition holds when w8s4 or w8s8 is below it under
   both protocols;
3. the guarantees: every scored line's depth at least the plan's floor D; the largest depth-CDF
   gap (`balance.depth_cdf_gap`) exactly 0; coverage 100 % (the exported prompts, checked as
   scripts/probe_v2.py does, and checked to be the evaluated ones); the elimination-only
   baseline at chance, 1 / n_records.

No group accuracy, phase profile or statistic is read or printed.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_v2  # noqa: E402  (the coverage check and file helpers: one copy)

# theory/phase-lab.md §9.3 and §9.4 (MAX_EXTENSIONS_V3 is src/analysis/training.rs's).
PROBE_FULL_MIN_ACCURACY = 0.95
PROBE_V3_CEILING = 0.98
MAX_EXTENSIONS_V3 = 4
PROBE_SEEDS = (100, 101, 102)
COMPRESSED = ("w8s4", "w8s8")
PROTOCOLS = ("prefix", "in-sequence")
SAMPLES = 48
CHANCE_TOLERANCE = probe_v2.CHANCE_TOLERANCE
load = probe_v2.load
fail = probe_v2.fail


def full_accuracy(run):
    m = load(os.path.join(run, "metrics.json"))
    n = len(m.get("extensions") or [])
    if n > MAX_EXTENSIONS_V3:
        fail(f"{run}: {n} extensions, §9.4 allows {MAX_EXTENSIONS_V3}")
    return m["final_eval"]["accuracy"], n


def scored_lines(run, protocol, floor):
    """(mean correct, smallest depth) of the scored outcome lines; only these two leave."""
    path = os.path.join(run, f"eval-{protocol}-outcomes.jsonl")
    n = correct = 0
    shallowest = None
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            o = json.loads(line)
            if o.get("depth") is None:
                fail(f"{path}: a line without its depth")
            shallowest = o["depth"] if shallowest is None else min(shallowest, o["depth"])
            correct += 1 if o["correct"] else 0
            n += 1
    if n == 0:
        fail(f"{path}: no outcomes")
    return correct / n, shallowest


def main():
    if len(sys.argv) != 2:
        fail("usage: probe_v3.py PROBE_DIR")
    d = sys.argv[1]
    plan = load(os.path.join(d, "plan.json"))
    if plan.get("rules") != "v3" or plan.get("depth_floor") is None:
        fail(f"{d}/plan.json: not a v3 probe plan with a depth_floor")
    floor = plan["depth_floor"]
    run = lambda preset, seed: os.path.join(d, "runs", f"{preset}-seed{seed}")
    task = probe_v2.task_of(run("full", PROBE_SEEDS[0]))
    for preset, seed in [("full", s) for s in PROBE_SEEDS] + [(p, PROBE_SEEDS[0]) for p in COMPRESSED]:
        if probe_v2.task_of(run(preset, seed)) != task:
            fail(f"{run(preset, seed)}: a different task from full-seed{PROBE_SEEDS[0]}")

    c1 = True
    parts = []
    for s in PROBE_SEEDS:
        a, n = full_accuracy(run("full", s))
        ok = a >= PROBE_FULL_MIN_ACCURACY
        c1 &= ok
        parts.append(f"seed {s} {100 * a:.2f} % after {n} extension(s) {'pass' if ok else 'fail'}")
    print(f"condition 1 (full attention trains, held-out exact match >= {100 * PROBE_FULL_MIN_ACCURACY:.0f} % "
          f"in each probe seed within §9.4's budget): {'; '.join(parts)} -> {'PASS' if c1 else 'FAIL'}")

    evals = {}
    shallowest = []
    below_both = {}
    parts = []
    for preset in COMPRESSED:
        below_both[preset] = True
        for protocol in PROTOCOLS:
            r = load(os.path.join(run(preset, PROBE_SEEDS[0]), f"eval-{protocol}.json"))
            if r["per_group"] != SAMPLES or r["protocol"] != protocol:
                fail(f"{preset}: eval-{protocol}.json is not {protocol} with {SAMPLES} families per group")
            evals[(preset, protocol)] = r
            mean, low = scored_lines(run(preset, PROBE_SEEDS[0]), protocol, floor)
            shallowest.append(low)
            below = mean < PROBE_V3_CEILING
            below_both[preset] &= below
            parts.append(f"{preset} {protocol} mean {100 * mean:.1f} % ({'below' if below else 'not below'})")
    c2 = any(below_both.values())
    print(f"condition 2 (off the ceiling beyond the floor D = {floor}: w8s4 or w8s8, seed {PROBE_SEEDS[0]}, mean "
          f"accuracy below {100 * PROBE_V3_CEILING:.0f} % under both protocols, {SAMPLES} families per group): "
          f"{'; '.join(parts)} -> {'PASS' if c2 else 'FAIL'}")

    gaps = [r["balance"].get("depth_cdf_gap") for r in evals.values()]
    if any(g is None for g in gaps):
        fail("an eval JSON has no balance.depth_cdf_gap")
    gap = max(gaps)
    covered = total = 0
    for protocol in PROTOCOLS:
        c, t = probe_v2.coverage(task, os.path.join(d, "exports", f"{protocol}.jsonl"),
                                 [evals[(p, protocol)] for p in COMPRESSED])
        covered += c
        total += t
    chance = 1.0 / task["n_records"]
    elims = [r.get("elimination_baseline") for r in evals.values()]
    if any(e is None for e in elims):
        fail("an eval JSON has no elimination_baseline")
    elim_dev = max(abs(e - chance) for e in elims)
    deep = min(shallowest) >= floor
    c3 = deep and gap == 0.0 and covered == total and elim_dev <= CHANCE_TOLERANCE
    print(f"condition 3 (the guarantees): shallowest scored depth {min(shallowest)} (must be >= D = {floor}); "
          f"largest depth-CDF gap {gap:g} (must be exactly 0); coverage {100 * covered / total:.1f} % "
          f"({covered}/{total} prompts, both protocols); elimination-only baseline "
          f"{100 * max(elims, key=lambda e: abs(e - chance)):.2f} % vs chance 1/{task['n_records']} = "
          f"{100 * chance:.2f} % -> {'PASS' if c3 else 'FAIL'}")
    meets = c1 and c2 and c3
    print(f"overall: {'MEETS' if meets else 'DOES NOT MEET'} the §9.3 rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
