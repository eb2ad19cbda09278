#!/usr/bin/env bash
# The GPU check: the gpu-marked tests, then short doctor / bench / parity / audit runs on CUDA,
# each writing JSON, and one markdown results table. At most 8 files, in one folder:
#   gpu-tests.log doctor.json bench-resnet50.json bench-bert-base.json parity.json audit.json
#   results.md gpu-check.log
# Sized for one H100/H200-class GPU in well under 10 minutes.
#
#   bash scripts/gpu-check.sh [OUTDIR]          (default: $OUT, else results/gpu-check-DATE)
#   DEVICE=cpu QUICK=1 bash scripts/gpu-check.sh /tmp/x   (a CPU smoke run of the script itself)
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-results/gpu-check-$(date -u +%Y%m%d-%H%M%S)}}
mkdir -p "$OUTDIR"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
LOG="$OUTDIR/gpu-check.log"
export PYTHONUNBUFFERED=1
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }

if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check: CUDA is not available here (torch sees no GPU); nothing to check" | tee -a "$LOG" >&2
  exit 2
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])' 2>&1 | tee -a "$LOG"

if [ "$QUICK" = 1 ]; then
  BENCH1=(--workload mlp --max-batch-size 256 --memory-budget 256MiB) BENCH2=(--workload cnn --batch-size 8)
  AUDIT=(--workload mlp); PARITY=(--seeds 2 --epochs 3); STEPS=(--steps 3 --warmup 1)
else
  BENCH1=(--workload resnet50 --batch-size auto --max-batch-size 1024)
  BENCH2=(--workload bert-base --batch-size auto --max-batch-size 512)
  AUDIT=(--workload bert-base --batch-size 16 --steps 2); PARITY=(--seeds 3); STEPS=(--steps 10 --warmup 3)
fi

say "gpu-marked tests"
"$PY" -m pytest -m gpu -q -p no:cacheprovider tests > "$OUTDIR/gpu-tests.log" 2>&1
echo "pytest -m gpu exit $?: $(tail -n 1 "$OUTDIR/gpu-tests.log")" | tee -a "$LOG"

FRAMEWORKS=torch
"$PY" -c 'import tensorflow, keras' 2>/dev/null && FRAMEWORKS=all
say "doctor --framework $FRAMEWORKS"
"$PY" -m ampkit doctor --framework "$FRAMEWORKS" --device "$DEVICE" --json "$OUTDIR/doctor.json" >> "$LOG" 2>&1
echo "doctor exit $?" | tee -a "$LOG"

say "bench ${BENCH1[*]}"
"$PY" -m ampkit bench --device "$DEVICE" --modes all "${BENCH1[@]}" "${STEPS[@]}" \
  --json "$OUTDIR/bench-resnet50.json" >> "$LOG" 2>&1; echo "bench exit $?" | tee -a "$LOG"

say "bench ${BENCH2[*]}"
"$PY" -m ampkit bench --device "$DEVICE" --modes all "${BENCH2[@]}" "${STEPS[@]}" \
  --json "$OUTDIR/bench-bert-base.json" >> "$LOG" 2>&1; echo "bench exit $?" | tee -a "$LOG"

say "fp8 rows of the benches above (--modes all holds fp8 where torchao is installed)"
"$PY" - "$OUTDIR"/bench-*.json <<'PYEOF' 2>&1 | tee -a "$LOG"
import json, sys
for path in sys.argv[1:]:
    rows = [r for r in json.load(open(path))["results"] if r["mode"] == "fp8"]
    for r in rows or [{"status": "absent (torchao not installed?)"}]:
        print(f"{path.rsplit('/', 1)[-1]}: fp8 {r['status']}, emulated={r.get('emulated')}, "
              f"speedup_vs_fp32={r.get('speedup_vs_fp32')} {r.get('error') or ''}")
PYEOF

say "parity"
"$PY" -m ampkit parity --device "$DEVICE" "${PARITY[@]}" --json "$OUTDIR/parity.json" >> "$LOG" 2>&1
echo "parity exit $?" | tee -a "$LOG"

say "audit"
"$PY" -m ampkit audit --device "$DEVICE" --mode fp16 "${AUDIT[@]}" --json "$OUTDIR/audit.json" >> "$LOG" 2>&1
echo "audit exit $?" | tee -a "$LOG"

"$PY" scripts/results_table.py "$OUTDIR" > "$OUTDIR/results.md"
say "done: $OUTDIR/results.md"
cat "$OUTDIR/results.md"
