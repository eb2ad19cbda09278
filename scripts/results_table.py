"""Render the JSON documents of a gpu-check run as one markdown results table.

    python scripts/results_table.py DIR > DIR/results.md
"""

from __future__ import annotations

import glob
import json
import os
import sys


def f(x, spec=".3g"):
    return "—" if x is None else format(x, spec)


def main(folder: str) -> None:
    docs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            with open(path, encoding="utf-8") as fh:
                docs[os.path.basename(path)] = json.load(fh)
        except (OSError, ValueError) as exc:
            print(f"<!-- {path}: unreadable ({exc}) -->")
    env = next((d.get("environment", {}) for d in docs.values()), {})
    gpus = ", ".join(f"{g['name']} (cc {g['compute_capability']}, {g['memory_total_bytes'] / 2**30:.0f} GiB)"
                     for g in env.get("gpus", [])) or env.get("device_name") or "?"
    print(f"# ampkit gpu-check results\n\n- device: {gpus}")
    print(f"- torch {env.get('framework_version')} · CUDA {env.get('cuda_runtime')} · cuDNN {env.get('cudnn')} · "
          f"driver {env.get('driver_version')} · python {env.get('python')}\n")
    expanded = []
    for name, d in docs.items():  # doctor --framework all: one document per framework
        if d.get("command") == "doctor" and "frameworks" in d:
            expanded += [(f"{name}: {fw}", sub) for fw, sub in d["frameworks"].items()]
        else:
            expanded.append((name, d))
    for name, d in expanded:
        cmd = d.get("command")
        if cmd is None and "modes" in d:
            cmd = "doctor"
        if cmd == "doctor":
            print(f"## doctor ({name})\n\n| mode | supported | self-test | speedup | verdict | reason |\n|---|---|---|---|---|---|")
            for mode, m in d["modes"].items():
                print(f"| {mode} | {m['supported']} | {m['selftest']} | {f(m['speedup'], '.2f')} | {m['verdict']} | "
                      f"{m['reason']} |")
            print(f"\nrecommended: **{d['recommended']}** — {d['reason']}\n")
        elif cmd == "bench":
            print(f"## bench: {d['workload']} on {d['device']} ({name})\n")
            print("| mode | status | batch | max batch | samples/s | p50 ms | p90 ms | peak memory GiB | speedup | "
                  "memory saving | TFLOP/s | MFU |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in d["results"]:
                mem = r["peak_memory_bytes"] / 2**30 if r.get("peak_memory_bytes") else None
                mfu = r["mfu"] * 100 if r.get("mfu") is not None else None
                print(f"| {r['mode']} | {r['status']} | {f(r['batch_size'], 'd')} | {f(r['max_batch_size'], 'd')} | "
                      f"{f(r['samples_per_s'], ',.1f')} | {f(r['step_ms']['p50'], '.2f')} | {f(r['step_ms']['p90'], '.2f')} | "
                      f"{f(mem, '.2f')} | {f(r['speedup_vs_fp32'], '.2f')} | {f(r['memory_saving_vs_fp32'], '.2f')} | "
                      f"{f(r['tflops'], '.1f')} | {f(mfu, '.1f') + '%' if mfu is not None else '—'} |")
                if r.get("error"):
                    print(f"|  | {r['error'][:120]} |||||||||||")
            print()
        elif cmd == "parity":
            print(f"## parity: {d['dataset']} ({name})\n\n| mode | accuracy | std | Δ vs fp32 | p-value | verdict |\n"
                  "|---|---|---|---|---|---|")
            for p in d["results"]:
                print(f"| {p['mode']} | {p['metric']['mean']:.4f} | {p['metric']['std']:.4f} | "
                      f"{f(p['delta_vs_fp32'], '+.4f')} | {f(p['p_value'], '.3g')} | {p['verdict']} |")
            print()
        elif cmd == "audit":
            print(f"## audit: {d.get('workload')} in {d['mode']} at loss scale {d['loss_scale']:g} ({name})\n")
            print(f"- modules: {len(d['layers'])}; first inf/NaN: {d['first_nonfinite']}; "
                  f"findings: {len(d['findings'])}")
            for fi in d["findings"][:10]:
                print(f"  - {fi['kind']} {fi['layer']}: {fi['advice']}")
            print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
