#!/usr/bin/env bash
# Cold wall time of `ampkit doctor` (full, then --quick), each in a fresh process.
# Targets on a 2-core CPU machine: full < 15 s, --quick < 5 s.
#   bash benchmarks/doctor_time.sh [--device DEV]
set -euo pipefail
cd "$(dirname "$0")/.."
AMPKIT=${AMPKIT:-.venv/bin/ampkit}
[ -x "$AMPKIT" ] || AMPKIT="python3 -m ampkit"
for flags in "" "--quick"; do
  start=$(date +%s%N)
  $AMPKIT doctor "$@" $flags --json - > /dev/null 2>&1 || true
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  printf 'ampkit doctor %-8s %d.%03d s\n' "${flags:-(full)}" $((ms / 1000)) $((ms % 1000))
done
