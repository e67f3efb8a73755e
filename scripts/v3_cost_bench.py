#!/usr/bin/env python3
"""Median training step of every arm of plans/v3.json, its cut arms included, with the plan's
run config and the arm's overrides: one `phasekv train --bench N` per arm, one after another,
one thread (theory/phase-lab.md §9.9). Configs go to a temporary folder.

Usage: RAYON_NUM_THREADS=1 scripts/v3_cost_bench.py N > theory/v3-probes/cost/train-bench-60.txt
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    steps = sys.argv[1]
    plan = json.loads((ROOT / "plans/v3.json").read_text())
    arms = plan["arms"] + (plan.get("cut") or {}).get("arms", [])
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            cfg = json.loads(json.dumps(plan["run"]))
            for key, value in arm.get("overrides", {}).items():
                section, field = key.split(".")
                cfg.setdefault(section, {})[field] = value
            path = Path(tmp) / f"{arm['name']}.json"
            path.write_text(json.dumps(cfg))
            preset = arm.get("preset", arm["name"])
            r = subprocess.run(
                [str(ROOT / "target/release/phasekv"), "train", "--config", str(path), "--preset", preset, "--bench", steps],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                sys.exit(f"{arm['name']}: {r.stderr.strip()}")
            print(arm["name"], r.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
