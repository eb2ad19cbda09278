#!/usr/bin/env bash
# The doctor's cold wall time next to what a user already waits for, in one run (issue #41):
# `python -m torch.utils.collect_env` (no verdict at all), `import torch`, `ampkit doctor` full and
# --quick, each in a fresh process, interleaved (collect_env, doctor, collect_env, doctor, ...) so that
# a machine whose load changes during the run does not favour either side; then the ratios. With
# TensorFlow installed (or --framework tensorflow): `import tensorflow` and the TensorFlow doctor too.
# CPU seconds (user+sys, children included) are printed beside the wall time: on a shared machine the
# wall time mostly measures the other jobs, the CPU time much less so. The load average is printed
# with every figure, and the recommendation of every full run (repeats should agree, #41 acceptance 2).
#   bash benchmarks/doctor_time.sh [--repeats N] [--framework torch|tensorflow|all] [--device DEV]
# Targets (#41, a quiet 2-core CPU): doctor full <= 1.3x and --quick <= 0.8x collect_env;
# TensorFlow doctor full <= 1.5x `import tensorflow` + 1 s.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
unset PYTHONDONTWRITEBYTECODE  # an installed package has its bytecode cached; so should this run
repeats=3 framework=torch device=cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --framework) framework=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "doctor_time.sh: unknown argument $1 (--repeats N, --framework torch|tensorflow|all, --device DEV)" >&2; exit 2 ;;
  esac
done
if [ "$framework" = all ]; then
  fws="torch"; "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('tensorflow') is None)" && fws="torch tensorflow"
else
  fws=$framework
fi
$PY -m ampkit doctor --device "$device" --quick --json /dev/null >/dev/null 2>&1  # bytecode written, files cached

declare -A WALL CPU REC
tmpd=$(mktemp -d); trap 'rm -rf "$tmpd"' EXIT
# the recommendation of the doctor document just written (so that a run shows whether repeats agree)
said() {
  local rec; rec=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['recommended'])" "$tmpd/d.json" 2>/dev/null || echo '?')
  REC[$1]="${REC[$1]:-} $rec"; printf '  %-34s recommended %s\n' "" "$rec"; rm -f "$tmpd/d.json"
}
# one timed command: label, then the command; adds "wall cpu" to WALL[label]/CPU[label]
timed() {
  local label=$1; shift
  local TIMEFORMAT='%R %U %S' out
  out=$( { time "$@" >/dev/null 2>&1; } 2>&1 | tail -1 )
  read -r real user sys <<<"$out"
  local cpu; cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.2f", u+s}')
  WALL[$label]="${WALL[$label]:-} $real"; CPU[$label]="${CPU[$label]:-} $cpu"
  printf '  %-34s %6.2f s wall %6.2f s cpu   load %s\n' "$label" "$real" "$cpu" "$(cut -d' ' -f1-3 /proc/loadavg)"
}
echo "CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')  ($(grep -o -w -E 'avx512_bf16|avx512_fp16|amx_bf16|amx_fp16|amx_tile' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' '))"
for i in $(seq 1 "$repeats"); do
  echo "run $i/$repeats"
  for fw in $fws; do
    if [ "$fw" = torch ]; then
      timed "collect_env" "$PY" -m torch.utils.collect_env
      timed "ampkit doctor (torch, full)" "$PY" -m ampkit doctor --framework torch --device "$device" --json "$tmpd/d.json"
      said "ampkit doctor (torch, full)"
      timed "python -c 'import torch'" "$PY" -c "import torch"
      timed "ampkit doctor (torch, --quick)" "$PY" -m ampkit doctor --framework torch --device "$device" --quick --json /dev/null
    else
      timed "python -c 'import tensorflow'" "$PY" -c "import tensorflow"
      timed "ampkit doctor (tensorflow, full)" "$PY" -m ampkit doctor --framework tensorflow --device "$device" --json "$tmpd/d.json"
      said "ampkit doctor (tensorflow, full)"
      timed "ampkit doctor (tensorflow, --quick)" "$PY" -m ampkit doctor --framework tensorflow --device "$device" --quick --json /dev/null
    fi
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
echo "medians over $repeats run(s) (wall / cpu):"
for label in "collect_env" "python -c 'import torch'" "ampkit doctor (torch, full)" "ampkit doctor (torch, --quick)" \
             "python -c 'import tensorflow'" "ampkit doctor (tensorflow, full)" "ampkit doctor (tensorflow, --quick)"; do
  [ -n "${WALL[$label]:-}" ] || continue
  printf '  %-34s %6.2f s wall %6.2f s cpu\n' "$label" "$(echo "${WALL[$label]}" | median)" "$(echo "${CPU[$label]}" | median)"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }'; }
if [ -n "${WALL[collect_env]:-}" ] && [ -n "${WALL[ampkit doctor (torch, full)]:-}" ]; then
  ce=$(echo "${WALL[collect_env]}" | median); cec=$(echo "${CPU[collect_env]}" | median)
  for kind in full --quick; do
    w=$(echo "${WALL[ampkit doctor (torch, $kind)]}" | median); c=$(echo "${CPU[ampkit doctor (torch, $kind)]}" | median)
    target=$([ "$kind" = full ] && echo 1.3 || echo 0.8)
    echo "  doctor $kind / collect_env: $(ratio "$w" "$ce")x wall, $(ratio "$c" "$cec")x cpu (target <= ${target}x)"
  done
fi
itf="python -c 'import tensorflow'" dtf="ampkit doctor (tensorflow, full)"
if [ -n "${WALL[$itf]:-}" ] && [ -n "${WALL[$dtf]:-}" ]; then
  it=$(echo "${WALL[$itf]}" | median); tf=$(echo "${WALL[$dtf]}" | median)
  itc=$(echo "${CPU[$itf]}" | median); tfc=$(echo "${CPU[$dtf]}" | median)
  echo "  tensorflow doctor full: ${tf} s wall, ${tfc} s cpu; target 1.5 x import tensorflow + 1 s =" \
       "$(awk -v a="$it" 'BEGIN{printf "%.2f", 1.5*a+1}') s wall, $(awk -v a="$itc" 'BEGIN{printf "%.2f", 1.5*a+1}') s cpu"
fi
for label in "ampkit doctor (torch, full)" "ampkit doctor (tensorflow, full)"; do
  [ -n "${REC[$label]:-}" ] && echo "  $label recommended:${REC[$label]}"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
