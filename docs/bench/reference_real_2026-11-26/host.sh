#!/usr/bin/env bash
# One device call on a 4-GPU host: one classification scenario of params/reference_real.yaml, all
# 10 configs x 3 seeds, after GPT-2's pretrain (skipped where this host already holds a checkpoint).
# fp32 runs take ~4x the others, so each fp32 seed runs in a sweep of its own on GPUs 0-2 and
# the other nine configs' cells (3 seeds each, one process) share GPUs 3,2,1,0 beside them;
# one sweep per group, all writing the same study folder. Every sweep stops starting runs
# that cannot end by DEADLINE_S after this script began (their cells leave them for the next call).
#   bash docs/bench/reference_real_2026-11-26/host.sh E $OUT/E.tgz 540
set -u
SC=$1; PACK=$2; DEADLINE=${3:-540}; T0=$(date +%s)
S=params/reference_real.yaml; O=executed/h100; PRE=$O/reference_real.pretrain/gpt2/result.json
left() { echo "$((DEADLINE - ($(date +%s) - T0)))s"; }
common="--out $O --scenario $SC --no-analysis --no-html --compile-cache /tmp/cc"
touch /tmp/stamp.$SC
python3 -m benchlib sweep $S $common --config fp32_baseline --seed 0 --gpus 0 --cpus 0-7 --time-budget "$(left)" > /tmp/sweep0.$SC.log 2>&1 &
first=$!
# the pretrain's record exists while it runs (status "running"): wait for a finished one and its
# checkpoint before another sweep plans, or each would start the pretrain again
ready() { python3 -c "import json,sys; r=json.load(open('$PRE')); sys.exit(r['status'] not in ('ok','stalled','degraded'))" 2>/dev/null \
          && [ -d $O/reference_real.pretrain/gpt2/model ]; }
until ready || ! kill -0 $first 2>/dev/null; do sleep 5; done
ready || { echo "no usable pretrain"; tail -30 /tmp/sweep0.$SC.log; exit 1; }
echo "pretrain ready at $(( $(date +%s) - T0 )) s"
python3 -m benchlib sweep $S $common --config fp32_baseline --seed 1 --gpus 1 --cpus 8-15 --time-budget "$(left)" > /tmp/sweep1.$SC.log 2>&1 &
python3 -m benchlib sweep $S $common --config fp32_baseline --seed 2 --gpus 2 --cpus 16-23 --time-budget "$(left)" > /tmp/sweep2.$SC.log 2>&1 &
others=amp_bf16,amp_fp16,bf16_pure,bf16_naive,fp16_naive,fp16_naive_noscale,amp_bf16_eps1e4,amp_bf16_8bit_adam,amp_bf16_fp32_head
python3 -m benchlib sweep $S $common --config $others --gpus 3,2,1,0 --runs-per-gpu 3 --cpus 24-63 --time-budget "$(left)" > /tmp/sweep3.$SC.log 2>&1 &
wait
echo "all sweeps ended at $(( $(date +%s) - T0 )) s"
for f in /tmp/sweep[0-3].$SC.log; do echo "== $f"; grep -v "^\s*$" "$f" | tail -25; done
python3 -m benchlib pack $O/reference_real --newer-than /tmp/stamp.$SC --out "$PACK"
