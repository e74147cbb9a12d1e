#!/usr/bin/env bash
# Calibration runs for the quality recipes (docs/calibration.md): on one GPU, pretrain the LM
# scenarios (A: GPT-2, B: RoBERTa) at `base`, save them as Hugging Face directories, and
# fine-tune the classification scenarios from them, evaluating every few hundred steps.
#   docs/calibration/calibrate.sh OUT PART [extra run flags...]
# PART: lm (A and B, with checkpoints), roberta (D, F), gpt2 (C, E), lr (D at a second lr).
# A missing checkpoint is made first, so every part runs on its own; with the checkpoints
# kept in OUT/ckpt between parts, a part costs only its own runs.
set -uo pipefail
out=${1:?OUT}; part=${2:?PART}; shift 2
mkdir -p "$out"
run() {  # name, flags...
  local name=$1; shift
  [ -f "$out/$name/result.json" ] && { echo "done already: $name"; return; }
  echo "== $name: $*"
  python3 -m benchlib run --size base --device cuda --quiet --out "$out/$name" "$@" "${EXTRA[@]}" 2>&1 | tail -3
  python3 - "$out/$name/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); m = r["metrics"]
keys = ("quality", "quality/val_loss", "quality/p_at_1", "quality/accuracy", "baseline/quality", "baseline/val_loss",
        "baseline/p_at_1", "baseline/accuracy", "quality/loss_floor", "quality/beats_baseline", "step_ms", "wall_s")
print(r["status"], r.get("reason"), {k: (round(m[k], 4) if isinstance(m.get(k), float) else m.get(k)) for k in keys if k in m},
      "wall_s", round(r["wall_s"], 1))
PY
}
EXTRA=("$@")
[ "$part" = one ] && { name=${EXTRA[0]}; EXTRA=(); }
lm() {
  run A_pretrain --scenario A --config amp_bf16 --steps 3000 --eval_every 500 --save_model True
  run B_pretrain --scenario B --config amp_bf16 --steps 3000 --eval_every 500 --save_model True
}
ft="--steps 2000 --batch_size 32 --eval_every 500 --warmup_steps 200"
case $part in
  lm) lm ;;
  roberta) lm
    run D_ft --scenario D --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/B_pretrain/model"
    run F_ft --scenario F --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/B_pretrain/model" ;;
  gpt2) lm
    run C_ft --scenario C --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/A_pretrain/model"
    run E_ft --scenario E --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/A_pretrain/model" ;;
  lr) lm
    run D_ft_lr3e-5 --scenario D --config amp_bf16 $ft --lr 3e-5 --model_name_or_path "$out/B_pretrain/model" ;;
  b_lr)  # B learned nothing at lr 6e-4 (the A recipe): RoBERTa from scratch, lower lr / larger batch
    run B_lr1e-4 --scenario B --config amp_bf16 --steps 1500 --eval_every 500 --lr 1e-4
    run B_lr2e-4_bs32 --scenario B --config amp_bf16 --steps 1200 --eval_every 400 --lr 2e-4 --batch_size 32 ;;
  parallel)  # quality only: runs share the GPU, so their step times are not speed results
    ( timeout 290 bash "$0" "$out" one A_pretrain --scenario A --config amp_bf16 --steps 3000 --eval_every 500 --save_model True ) &
    ( timeout 290 bash "$0" "$out" one B_pretrain --scenario B --config amp_bf16 --steps 2500 --eval_every 500 --save_model True --lr 2e-4 --batch_size 32 ) &
    wait
    for s in C E; do ( timeout 270 bash "$0" "$out" one ${s}_ft --scenario $s --config amp_bf16 $ft --steps 1500 --lr 1e-4 --model_name_or_path "$out/A_pretrain/model" ) & done
    for s in D F; do ( timeout 270 bash "$0" "$out" one ${s}_ft --scenario $s --config amp_bf16 $ft --steps 1500 --lr 1e-4 --model_name_or_path "$out/B_pretrain/model" ) & done
    wait ;;
  one) run "$name" "${@:2}" ;;
  final)  # the chosen fine-tuning recipes at full length, from the checkpoints of `parallel`
    if [ ! -d "$out/A_pretrain/model" ] || [ ! -d "$out/B_pretrain/model" ]; then
      ( timeout 290 bash "$0" "$out" one A_pretrain --scenario A --config amp_bf16 --steps 3000 --eval_every 500 --save_model True ) &
      ( timeout 290 bash "$0" "$out" one B_pretrain --scenario B --config amp_bf16 --steps 2500 --eval_every 500 --save_model True --lr 2e-4 --batch_size 32 ) &
      wait
    fi
    ( timeout 540 bash "$0" "$out" one C_ft_final --scenario C --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/A_pretrain/model" ) &
    ( timeout 540 bash "$0" "$out" one E_ft_final --scenario E --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/A_pretrain/model" ) &
    ( timeout 540 bash "$0" "$out" one D_ft_lr3e-4 --scenario D --config amp_bf16 $ft --lr 3e-4 --model_name_or_path "$out/B_pretrain/model" ) &
    ( timeout 540 bash "$0" "$out" one F_ft_lr3e-4 --scenario F --config amp_bf16 $ft --lr 3e-4 --model_name_or_path "$out/B_pretrain/model" ) &
    wait ;;
  roberta64)  # B at batch 64 (MLM scores 15% of tokens: at batch 8 it sees 1/20 of A's targets per step)
    run B_bs64 --scenario B --config amp_bf16 --steps 3000 --eval_every 500 --save_model True --lr 3e-4 --batch_size 64
    ( timeout 200 bash "$0" "$out" one D_ft_from_bs64 --scenario D --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/B_bs64/model" ) &
    ( timeout 200 bash "$0" "$out" one F_ft_from_bs64 --scenario F --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/B_bs64/model" ) &
    wait ;;
  c_only)
    [ -d "$out/A_pretrain/model" ] && run C_ft --scenario C --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$out/A_pretrain/model" ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
