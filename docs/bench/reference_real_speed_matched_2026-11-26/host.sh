#!/usr/bin/env bash
# One device call of params/reference_real_speed_matched.yaml: GPU i-th of this host runs the
# i-th SCENARIO:SEEDS given, all configs of a seed on one GPU (its gains over fp32 paired within
# the GPU), each GPU's sweep pinned to its own share of the cores; one pack of the new records.
#   bash docs/bench/reference_real_speed_matched_2026-11-26/host.sh $OUT/x4.tgz 560 F:0 F:1 F:2 E:1,2
#   bash docs/bench/reference_real_speed_matched_2026-11-26/host.sh $OUT/E0.tgz 560 E:0      # 1 GPU
# A sweep stops starting runs that cannot end by DEADLINE_S after this script began. A carried
# cc/cc.tgz (torch.compile's cache from an earlier call on the same kind of GPU) is loaded first,
# and the cache is packed back as $OUT/cc.tgz for the next call (it comes back only under the
# device's 16 MiB a file: one scenario on one GPU, 7 MiB; four GPUs' E and F, over 16 MiB).
set -u
PACK=$1; DEADLINE=$2; shift 2; T0=$(date +%s)
S=params/reference_real_speed_matched.yaml; O=${OUTROOT:-executed/h100}; CACHE=/tmp/cc
# 16-bit configs first: a config with no finished run is costed like the costliest one seen
# (budget.py), so fp32 first in a fresh folder would leave the last 16-bit run unstarted in a call it fits.
# (Not CC: that names the C compiler Triton builds with where the host exports it.)
CONFIGS=${CONFIGS:-bf16_pure amp_bf16 fp32_baseline}
mkdir -p $CACHE; [ -f cc/cc.tgz ] && tar xzf cc/cc.tgz -C $CACHE
n=$#; per=$(( $(nproc) / n )); touch /tmp/stamp.host
i=0
for job in "$@"; do
  lo=$((i * per)); hi=$((lo + per - 1))
  ( for c in $CONFIGS; do
      python3 -m benchlib sweep $S --out $O --scenario "${job%%:*}" --seed "${job#*:}" --config $c \
          --gpus "$i" --cpus "$lo-$hi" --no-analysis --no-html --compile-cache $CACHE \
          --time-budget "$((DEADLINE - ($(date +%s) - T0)))s"
    done ) > /tmp/sweep$i.log 2>&1 &
  i=$((i + 1))
done
wait
echo "all sweeps ended at $(( $(date +%s) - T0 )) s"
for f in /tmp/sweep*.log; do echo "== $f"; grep -v "^\s*$" "$f" | tail -6; done
python3 -m benchlib pack $O/reference_real_speed_matched --newer-than /tmp/stamp.host --out "$PACK"
[ -n "${OUT:-}" ] && tar czf "$OUT/cc.tgz" -C $CACHE .
