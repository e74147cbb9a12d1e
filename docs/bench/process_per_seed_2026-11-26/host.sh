# run from the repository root at commit b23d315 (process_per existed there), on one GPU; the first call
# wrote executed/ps with the same line (cache cold) and executed/pr's fp32 run before the call's limit
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DTYPE_BENCH_COMMIT=b23d3157f62a11e39c52cab297b7561698192ff8
S=params/reference_real_speed_matched.yaml; T0=$(date +%s)
c="--scenario E --seed 0 --gpus 0 --cpus 0-15 --no-analysis --no-html --compile-cache /tmp/cc"
python3 -m benchlib sweep $S --out executed/ps2 $c 2>&1 | grep -v "^\s*$" | tail -4 | cut -c1-300
echo "one process: $(( $(date +%s) - T0 )) s"
for k in fp32_baseline amp_bf16 bf16_pure; do python3 -m benchlib sweep $S --out executed/pr $c --config $k > /dev/null 2>&1; done
echo "three processes: $(( $(date +%s) - T0 )) s"
tar czf $OUT/ab.tgz --exclude='*.safetensors' executed/ps executed/ps2 executed/pr
