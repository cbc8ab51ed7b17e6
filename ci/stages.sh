# shellcheck shell=bash
# Sourced by ci/gpu-bench.sh and ci/host-cpu.sh: `stage`, which runs one step of
# a device session under its own time limit, cut to what is left of the whole
# call's budget. Set OUTDIR, DEADLINE (epoch seconds) and SCALE (multiplies every
# limit) first.

stage() {  # stage NAME SECONDS CMD...: CMD's output to NAME.log, its exit code to summary.txt
  local name=$1 limit t0 rc
  limit=$(awk -v s="$2" -v k="$SCALE" 'BEGIN { printf "%d", s * k }')
  shift 2
  t0=$(date +%s)
  if [ $((DEADLINE - t0)) -lt "$limit" ]; then limit=$((DEADLINE - t0)); fi
  if [ "$limit" -lt 5 ]; then
    echo "$name: skipped (the budget is spent)" | tee -a "$OUTDIR/summary.txt"
    return
  fi
  timeout -k 5 "$limit" "$@" >>"$OUTDIR/$name.log" 2>&1
  rc=$?
  echo "$name: rc=$rc ($(($(date +%s) - t0)) s of $limit)" | tee -a "$OUTDIR/summary.txt"
}
