#!/usr/bin/env bash
# Calibration runs for the quality recipes (docs/calibration.md): on one GPU, pretrain the LM
# scenarios (A: GPT-2, B: RoBERTa) at `base`, save them as Hugging Face directories, and
# fine-tune the classification scenarios from them, evaluating every few hundred steps.
#   docs/calibration/calibrate.sh OUT PART [extra run flags...]
# PART: lm (A and B, with checkpoints), roberta (D, F), gpt2 (C, E), lr (D at a second lr);
# small (fourth session: A-F at the `small` size, three fine-tuning lrs).
# Second session (docs/calibration.md, h100_2026-11-23b): b_long (B past the no-context plateau,
# watched), auto2, auto3 (each call decides from the last call's records: fine-tune D/F from a B
# checkpoint that left the plateau, else continue B); CAL_BUDGET_S = the part's seconds;
# CAL_TEST_FLAGS (e.g. '--size tiny --device cpu --steps 40') and CAL_WATCH_* only to test the script.
# A missing checkpoint is made first, so every part runs on its own; with the checkpoints
# kept in OUT/ckpt between parts, a part costs only its own runs.
set -uo pipefail
out=${1:?OUT}; part=${2:?PART}; shift 2
mkdir -p "$out"
run() {  # name, flags...
  local name=$1; shift
  [ -f "$out/$name/result.json" ] && { echo "done already: $name"; return; }
  echo "== $name: $*"
  python3 -m dtype_bench run --size base --device cuda --quiet --out "$out/$name" "$@" "${EXTRA[@]}" ${CAL_TEST_FLAGS:-} 2>&1 | tail -3
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

# ---- second session: long B runs under a time budget, a watchdog, and decisions on the device ----
budget=${CAL_BUDGET_S:-540}; t_start=$SECONDS
left() { echo $(( budget - (SECONDS - t_start) )); }
bg_run() {  # secs name flags...: one run under `timeout` in the background (its pid in BG_PID)
  local secs=$1 name=$2; shift 2
  mkdir -p "$out/$name"
  echo "== $name (limit ${secs}s): $*"
  timeout "$secs" python3 -m dtype_bench run --size base --device cuda --quiet --out "$out/$name" "$@" "${EXTRA[@]}" \
    ${CAL_TEST_FLAGS:-} >"$out/$name.log" 2>&1 &
  BG_PID=$!
}
summary() {  # name: status and final metrics of a finished run, or its last evaluation if cut off
  python3 - "$out/$1" <<'PY'
import json, os, sys
d = sys.argv[1]
if os.path.exists(f"{d}/result.json"):
    r = json.load(open(f"{d}/result.json")); m = r["metrics"]
    keys = ("quality", "baseline/quality", "quality/loss_floor", "quality/micro_f1", "quality/beats_baseline", "step_ms")
    print(os.path.basename(d), r["status"], r.get("reason"),
          {k: (round(m[k], 4) if isinstance(m.get(k), float) else m.get(k)) for k in keys if k in m}, "wall_s", round(r["wall_s"], 1))
else:
    ev = [json.loads(l) for l in open(f"{d}/steps.jsonl") if '"eval"' in l] if os.path.exists(f"{d}/steps.jsonl") else []
    print(os.path.basename(d), "cut off (no record); last eval:", ev[-1] if ev else None)
PY
}
evals() {  # name: "step:val_loss ..." of its evaluations so far
  python3 - "$out/$1/steps.jsonl" <<'PY'
import json, sys
try:
    ev = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
except FileNotFoundError:
    ev = []
print(" ".join(f"{e['step']}:{e['eval'].get('val_loss', float('nan')):.3f}" for e in ev))
PY
}
b_final() {  # name: final val loss of a finished B run with a checkpoint, else 99
  python3 - "$out/$1" <<'PY'
import json, os, sys
d = sys.argv[1]
ok = os.path.exists(f"{d}/result.json") and os.path.isdir(f"{d}/model")
print(json.load(open(f"{d}/result.json"))["metrics"]["quality/val_loss"] if ok else 99)
PY
}
best_b() {  # the finished B run of this session with a checkpoint and the lowest final val loss
  local best="" bl=99 v
  for d in "$out"/B_*/; do
    d=$(basename "$d"); v=$(b_final "$d")
    if python3 -c "import sys; sys.exit(not float('$v') < float('$bl'))"; then best=$d; bl=$v; fi
  done
  echo "$best"
}
left_plateau() {  # name: its final val loss is <= 7.5 (the no-context plateau is ~7.83, eval SE 0.03)
  python3 -c "import sys; sys.exit(not float('$(b_final "$1")') <= 7.5)"
}
watch() {  # pid name bound: stop the run if an evaluation at step >= 999 is above bound
  local pid=$1 name=$2 bound=$3
  while kill -0 "$pid" 2>/dev/null; do
    sleep 10
    if python3 - "$out/$name/steps.jsonl" "$bound" "${CAL_WATCH_STEP:-999}" <<'PY'
import json, sys
try:
    ev = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
except FileNotFoundError:
    ev = []
sys.exit(0 if any(e["step"] >= int(sys.argv[3]) and e["eval"]["val_loss"] > float(sys.argv[2]) for e in ev) else 1)
PY
    then echo "watchdog: $name above $bound after step ${CAL_WATCH_STEP:-999} ($(evals "$name")): stopped"; kill "$pid"; break; fi
  done
  wait "$pid"
}
b_steps() {  # secs [ms/step] [fixed s]: B steps that fit in secs at batch 64 (70 ms/step alone on the H100)
  echo $(( ($1 - ${3:-100}) * 1000 / ${2:-73} ))
}
B64="--scenario B --config amp_bf16 --batch_size 64 --eval_every 500 --save_model True --min_lr_ratio 1.0"
ft_pair() {  # checkpoint-run secs: D at lr 3e-5 and 1e-4 (3,000 steps) and F at 1e-4 (2,000 steps), sharing the GPU
  local ck=$out/$1/model secs=$2
  echo "== fine-tunes from $1 ($(evals "$1"))"
  ( timeout "$secs" bash "$0" "$out" one D_ft_${1}_lr3e-5 --scenario D --config amp_bf16 $ft --steps 3000 --warmup_steps 300 --lr 3e-5 --model_name_or_path "$ck" ) &
  ( timeout "$secs" bash "$0" "$out" one D_ft_${1}_lr1e-4 --scenario D --config amp_bf16 $ft --steps 3000 --warmup_steps 300 --lr 1e-4 --model_name_or_path "$ck" ) &
  ( timeout "$secs" bash "$0" "$out" one F_ft_${1}_lr1e-4 --scenario F --config amp_bf16 $ft --lr 1e-4 --model_name_or_path "$ck" ) &
  wait
}
b_cont() {  # checkpoint-run name secs: continue B from a checkpoint at lr 3e-4, constant after 300 warm-up
  local n
  n=$(b_steps "$3" 73 80)
  bg_run "$3" "$2" $B64 --lr 3e-4 --warmup_steps 300 --steps "$n" --model_name_or_path "$out/$1/model"
  wait "$BG_PID"; summary "$2"; echo "evals: $(evals "$2")"
}
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
  b_long)  # B at batch 64, lr 5e-4 after 1,000 warm-up steps, then constant; watched: above 8.0 after
    # step 999 (lr 3e-4 was at 7.88 there) it is stopped and lr 3e-4 (300 warm-up, constant) takes the rest
    n=$(b_steps "$(left)" 72 110)
    bg_run "$(left)" B_lr5e-4_wu1k $B64 --lr 5e-4 --warmup_steps 1000 --steps "$n"
    watch "$BG_PID" B_lr5e-4_wu1k "${CAL_WATCH_BOUND:-8.0}"
    summary B_lr5e-4_wu1k; echo "evals: $(evals B_lr5e-4_wu1k)"
    if [ "$(b_final B_lr5e-4_wu1k)" = 99 ] || ! python3 -c "import sys; sys.exit(not $(b_final B_lr5e-4_wu1k) < 8.0)"; then
      if [ "$(left)" -gt 200 ]; then
        n=$(b_steps "$(( $(left) - 10 ))" 72 80)
        bg_run "$(( $(left) - 10 ))" B_lr3e-4_const $B64 --lr 3e-4 --warmup_steps 300 --steps "$n"
        wait "$BG_PID"; summary B_lr3e-4_const; echo "evals: $(evals B_lr3e-4_const)"
      fi
    fi ;;
  auto2)  # the best B checkpoint so far: fine-tune D/F from it if it left the plateau, else continue B
    ck=$(best_b); echo "best B checkpoint: ${ck:-none} ($( [ -n "$ck" ] && b_final "$ck"))"
    [ -z "$ck" ] && { echo "no B checkpoint"; exit 3; }
    if left_plateau "$ck"; then ft_pair "$ck" "$(( $(left) - 5 ))"
    else b_cont "$ck" B_cont2 "$(( $(left) - 5 ))"; fi ;;
  auto3)  # if the last call continued B: fine-tune from it when it left the plateau, else D longer
    # (lr 3e-5, 5,000 steps, alone) from the best checkpoint; if the last call fine-tuned: continue B
    ck=$(best_b); echo "best B checkpoint: ${ck:-none} ($( [ -n "$ck" ] && b_final "$ck"))"
    [ -z "$ck" ] && { echo "no B checkpoint"; exit 3; }
    if ls -d "$out"/D_ft_* >/dev/null 2>&1; then b_cont "$ck" B_cont3 "$(( $(left) - 5 ))"
    elif left_plateau "$ck"; then ft_pair "$ck" "$(( $(left) - 5 ))"
    else
      ( timeout "$(( $(left) - 5 ))" bash "$0" "$out" one D_ft_${ck}_lr3e-5_5k --scenario D --config amp_bf16 $ft --steps 5000 --warmup_steps 300 --lr 3e-5 --model_name_or_path "$out/$ck/model" )
    fi ;;
  bert)  # BERT's schedule (third session): B at 128 tokens for most steps (the second session's
    # diagnostic left the no-context plateau there), then at 512 tokens so positions 130-513 train,
    # then D (lr 3e-5 and 1e-4) and F (lr 1e-4) fine-tuned from it at 512, sharing the GPU.
    # CAL_P128_S / CAL_P512_S / CAL_FT_S: seconds of each phase (the runs' `timeout`s).
    s128=${CAL_P128_S:-560}; s512=${CAL_P512_S:-200}; sft=${CAL_FT_S:-330}
    bg_run "$s128" B_seq128 --scenario B --config amp_bf16 --seq_len 128 --batch_size 128 --lr 3e-4 \
      --warmup_steps 300 --min_lr_ratio 1.0 --steps $(( (s128 - 80) * 1000 / ${CAL_MS128:-38} )) --eval_every 1000 --save_model True
    wait "$BG_PID"; summary B_seq128; echo "evals: $(evals B_seq128)"
    [ -d "$out/B_seq128/model" ] || { echo "no 128-token checkpoint"; exit 3; }
    bg_run "$s512" B_seq512 --scenario B --config amp_bf16 --batch_size 64 --lr 3e-4 --warmup_steps 100 \
      --steps $(( (s512 - 75) * 1000 / ${CAL_MS512:-72} )) --eval_every 400 --save_model True --model_name_or_path "$out/B_seq128/model"
    wait "$BG_PID"; summary B_seq512; echo "evals: $(evals B_seq512)"
    [ -d "$out/B_seq512/model" ] || { echo "no 512-token checkpoint"; exit 3; }
    ft_pair B_seq512 "$sft"
    for n in D_ft_B_seq512_lr3e-5 D_ft_B_seq512_lr1e-4 F_ft_B_seq512_lr1e-4; do summary "$n"; echo "evals: $(evals "$n")"; done ;;
  small)  # the reference study's quality size (fourth session): A and B pretrained at `small`
    # (4 layers, width 256, vocab 8,192, 1,000 labels), then C-F fine-tuned from them at three
    # learning rates; every run shares the GPU (quality only). CAL_PRE_S / CAL_FT_S: each stage's seconds.
    pre=${CAL_PRE_S:-230}; fts=${CAL_FT_S:-250}; S="--size small --config amp_bf16 --save_model True"
    ( timeout "$pre" bash "$0" "$out" one A_s --scenario A $S --lr 1e-3 --steps 4000 --warmup_steps 200 --eval_every 500 ) &
    ( timeout "$pre" bash "$0" "$out" one B_s_lr1e-3 --scenario B $S --lr 1e-3 --batch_size 64 --steps 6000 --warmup_steps 300 --eval_every 1000 ) &
    ( timeout "$pre" bash "$0" "$out" one B_s_lr3e-4 --scenario B $S --lr 3e-4 --batch_size 64 --steps 6000 --warmup_steps 300 --eval_every 1000 ) &
    wait
    for n in A_s B_s_lr1e-3 B_s_lr3e-4; do summary "$n"; echo "evals: $(evals "$n")"; done
    ck=$(best_b); echo "best B checkpoint: ${ck:-none}"
    fs="--size small --config amp_bf16 --steps 2000 --batch_size 32 --warmup_steps 200 --eval_every 500"
    for lr in 1e-4 3e-4 1e-3; do
      for s in C E; do [ -d "$out/A_s/model" ] && ( timeout "$fts" bash "$0" "$out" one ${s}_s_lr$lr --scenario $s $fs --lr $lr --model_name_or_path "$out/A_s/model" ) & done
      for s in D F; do [ -n "$ck" ] && ( timeout "$fts" bash "$0" "$out" one ${s}_s_lr$lr --scenario $s $fs --lr $lr --model_name_or_path "$out/$ck/model" ) & done
    done
    wait
    for s in C D E F; do for lr in 1e-4 3e-4 1e-3; do summary ${s}_s_lr$lr; echo "evals: $(evals ${s}_s_lr$lr)"; done; done ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
