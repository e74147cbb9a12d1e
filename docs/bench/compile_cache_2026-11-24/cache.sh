#!/usr/bin/env bash
# usage (on the GPU host, repo root): bash .gpu/cache.sh OUTNAME   -- two runs of reference_speed
# (A and D amp_bf16 seed 0) into a scratch study folder, compiled into the folder .inductor
# (carried in when it exists), then the same two again (--force) in new processes; returns the
# records and the folder.
W=${WHEELS:-.whl-lite}; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; hostname
python3 -c "import torch,torchao,transformers;print(torch.__version__,torch.version.cuda,torchao.__version__,transformers.__version__)"
C=$PWD/.inductor; rm -rf $C; mkdir -p $C; P=${PASSES:-1 2}
[ -f .inductor-carry/inductor.tgz ] && tar xzf .inductor-carry/inductor.tgz -C $C && echo "carried cache unpacked"; echo "cache folder at start: $(du -sh $C | cut -f1), $(find $C -type f | wc -l) files"
N=${1:-cc}; S=/tmp/$N
for pass in $P; do
  f=""; [ $pass = 2 ] && f=--force
  timeout 250 python3 -m benchlib sweep params/reference_speed.yaml --out $S --only 'A/amp_bf16/seed0' --only 'D/amp_bf16/seed0' --compile-cache $C --no-analysis --no-html $f 2>&1 | grep -E "compile cache|fixed cost|executed|error" 
  mkdir -p $S/pass$pass; for r in A D; do cp $S/reference_speed/runs/$r/amp_bf16/seed0/result.json $S/pass$pass/$r.json; done
  echo "cache folder after pass $pass: $(du -sh $C | cut -f1), $(find $C -type f | wc -l) files"
done
tar czf $OUT/records.tgz -C $S $(for p in $P; do echo pass$p; done)
tar czf $OUT/inductor.tgz -C $C . ; ls -la $OUT
