#!/usr/bin/env bash
# One device call that runs the real speed studies' missing cells on one multi-GPU host: each
# argument after PACKDIR and DEADLINE_S is GPU i's queue, its items STUDY/SCENARIO/SEEDS/CONFIG
# one sweep each, in order, on that GPU and its own share of the cores; an item's records go to
# executed/h100 (OUTROOT), or to the folder after its '@':
#   bash docs/bench/real_speed_one_host_2026-11-26/host.sh $OUT 545 \
#     "reference_real_speed/A/0,1,2/fp32_baseline" \
#     "reference_real_speed_matched/F/0/bf16_pure@executed/h200 reference_real_speed_matched/F/0/amp_bf16@executed/h200 ..."
# A sweep starts no run that cannot end DEADLINE_S after this script began (budget.py); a cut
# cell's remaining seeds run on the next call. Every study touched is packed to PACKDIR/STUDY.tgz
# (its records newer than this call). torch.compile's cache: /tmp/ccI for GPU i, kept on the host
# between calls of one machine, so a cell's later call loads what its earlier one compiled; with
# SHARED_CACHE=DIR one folder for all GPUs (queues that rotate the configs' order then compile
# each config once and load it on the other GPUs), packed back as PACKDIR/cc.tgz. Python's bytecode:
# /tmp/pyc for all (from 2026-11-27; docs/bench/bytecode_cache_2026-11-27).
set -u
PACKDIR=$1; DEADLINE=$2; shift 2; T0=$(date +%s)
O=${OUTROOT:-executed/h100}
n=$#; per=$(( $(nproc) / n )); touch /tmp/stamp.host
nvidia-smi -L; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
i=0
for queue in "$@"; do
  lo=$((i * per)); hi=$((lo + per - 1)); cache=${SHARED_CACHE:-/tmp/cc$i}; mkdir -p $cache
  ( for item in $queue; do
      root=$O; [[ $item == *@* ]] && root=${item#*@}
      IFS=/ read -r study scn seeds config <<< "${item%@*}"
      echo "== $item at $(( $(date +%s) - T0 )) s"
      python3 -m benchlib sweep params/$study.yaml --out $root --scenario "$scn" --seed "$seeds" --config "$config" \
          --gpus "$i" --cpus "$lo-$hi" --no-analysis --no-html --compile-cache $cache --bytecode-cache /tmp/pyc \
          --time-budget "$((DEADLINE - ($(date +%s) - T0)))s"
    done ) >> /tmp/sweep$i.log 2>&1 &
  i=$((i + 1))
done
wait
echo "all sweeps ended at $(( $(date +%s) - T0 )) s"
for f in /tmp/sweep*.log; do echo "== $f"; grep -E "^== |time budget|failed|error|Error" "$f" | tail -12; done
for item in $(printf '%s\n' "$@" | tr ' ' '\n' | sort -u); do
  root=$O; [[ $item == *@* ]] && root=${item#*@}; dir=$root/${item%%/*}
  [ -f "$PACKDIR/${item%%/*}.tgz" ] || python3 -m benchlib pack $dir --newer-than /tmp/stamp.host --out "$PACKDIR/${item%%/*}.tgz"
done
[ -n "${SHARED_CACHE:-}" ] && tar czf "$PACKDIR/cc.tgz" -C "$SHARED_CACHE" . && ls -la "$PACKDIR"
