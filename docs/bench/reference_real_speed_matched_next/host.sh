#!/usr/bin/env bash
# One device call: one scenario of params/reference_real_speed_matched.yaml, the seeds named,
# seed i-th on GPU i-th of this host (all three configs of a seed on one GPU, so its gains over
# fp32 are paired within a GPU), each GPU's sweep pinned to its own share of the cores.
#   bash docs/bench/reference_real_speed_matched_next/host.sh E 0,1,2,3 $OUT/E.tgz 560   # 4 GPUs
#   bash docs/bench/reference_real_speed_matched_next/host.sh E 0,1 $OUT/E01.tgz 560     # 2 GPUs, two calls
# A sweep stops starting runs that cannot end by DEADLINE_S after this script began.
set -u
SC=$1; SEEDS=$2; PACK=$3; DEADLINE=${4:-560}; T0=$(date +%s)
S=params/reference_real_speed_matched.yaml; O=executed/h100
IFS=, read -ra seed <<< "$SEEDS"
n=${#seed[@]}; cores=$(nproc); per=$((cores / n))
touch /tmp/stamp.$SC
for i in "${!seed[@]}"; do
  lo=$((i * per)); hi=$((lo + per - 1))
  python3 -m benchlib sweep $S --out $O --scenario $SC --seed "${seed[$i]}" --gpus "$i" --cpus "$lo-$hi" \
      --no-analysis --no-html --compile-cache /tmp/cc --time-budget "$((DEADLINE - ($(date +%s) - T0)))s" \
      > /tmp/sweep$i.$SC.log 2>&1 &
done
wait
echo "all sweeps ended at $(( $(date +%s) - T0 )) s"
for f in /tmp/sweep*.$SC.log; do echo "== $f"; grep -v "^\s*$" "$f" | tail -12; done
python3 -m benchlib pack $O/reference_real_speed_matched --newer-than /tmp/stamp.$SC --out "$PACK"
