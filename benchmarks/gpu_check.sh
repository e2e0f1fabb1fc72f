#!/usr/bin/env bash
# autotune's GPU check: one prepared script for a machine with CUDA or ROCm GPUs (torch.cuda).
# Run it from the repository root, in one call; it took 4 min 40 s on one H200 (RESULTS.md):
#   bash benchmarks/gpu_check.sh          (table and logs under $OUT, else ./gpu-check)
# It uses the active Python when torch, ray, optuna and mlflow import there (your ROCm or CUDA
# torch), else makes a venv (.venv-gpu: torch from the registry, its default CUDA build). A GPU
# node that reaches no registry: install the wheels of ray, optuna, mlflow and their needs with
# `pip install --target DIR` where it can, and put DIR and this folder on PYTHONPATH. Then:
#   - the fingerprint;
#   - the probe on the GPU in fp32, bf16 and fp16 with the GradScaler, each counting the host
#     synchronisations it makes (torch's sync debug mode) against the number the telemetry
#     schedule allows, and its step times (CUDA events) against wall time;
#   - `autotune audit --device cuda` in the three dtypes;
#   - a 4-trial study (amp.yaml, fp16 + GradScaler knobs) with one GPU per trial;
#   - with two or more GPUs: a DDP probe over all of them (nccl/RCCL) with NCCL_ALGO=Ring set
#     as a knob and read back in every rank.
# Each step's exit status, time and last line go into one table (table.md). Record that table,
# with the machine, in benchmarks/RESULTS.md.
set -u
OUT="${OUT:-$PWD/gpu-check}"; mkdir -p "$OUT"
T="$OUT/table.md"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" >> "$T"; }
step() { # name, timeout (s), command...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  row "$name" "rc=$rc, $((SECONDS - s)) s" "$(grep -v '^\s*$' "$OUT/$name.log" | tail -1 | cut -c1-220 | tr '|' '/')"
  echo "$name: rc=$rc ($((SECONDS - s)) s)"
}
printf '| step | status | last line |\n|---|---|---|\n' > "$T"

# An environment that already has torch and the stack (a GPU node's image, an active venv) is
# used as it is, torch build included: a GPU machine may have no registry to install from.
if python3 -c 'import torch, ray, optuna, mlflow' 2>/dev/null; then
  python3 -c 'import autotune.cli' 2>/dev/null ||
    step install 300 bash -c 'pip install -q --no-deps --no-build-isolation -e . || pip install -q --no-deps -e .'
else
  step venv 420 bash -c 'python3 -m venv .venv-gpu && . .venv-gpu/bin/activate && pip install -q torch && pip install -q -e .'
  . .venv-gpu/bin/activate || { cat "$T"; exit 1; }
fi
# The project importable without its console script (on PYTHONPATH, say): call it through python.
if ! command -v autotune > /dev/null; then
  mkdir -p "$OUT/bin" && printf '#!/bin/sh\nexec python3 -m autotune "$@"\n' > "$OUT/bin/autotune"
  chmod +x "$OUT/bin/autotune" && export PATH="$OUT/bin:$PATH"
fi
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
step devices 60 python3 -c 'import torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; print(torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip, "devices", n, torch.cuda.get_device_name(0) if n else "(none)")'
if [ "$NGPU" -lt 1 ]; then echo; cat "$T"; echo "no GPU visible to torch: stopping"; exit 1; fi
step fingerprint 60 autotune fingerprint

for p in fp32 bf16 fp16; do
  step "probe_sync_$p" 150 python3 benchmarks/gpu_sync_check.py --precision "$p" --steps 300
done
for d in fp32 bf16 fp16; do
  step "audit_$d" 120 autotune audit --device cuda --dtype "$d" --no-log
done

mkdir -p "$OUT/study"
( cd "$OUT/study" && export MLFLOW_TRACKING_URI="sqlite:///$OUT/study/mlflow.db" &&
  step study_amp_4_trials 420 autotune study --space amp.yaml --study-dir "$OUT/study/studies" \
    --set budget.trials=4 --set probe.device=cuda --set verify.top_k=1 --set verify.seeds=2 --quiet )

if [ "$NGPU" -ge 2 ]; then
  cat > "$OUT/ddp.yaml" <<YAML
name: gpu-ddp
workload: {name: tiny_gpt, size: small}
probe: {steps: 100, micro_batch: 16, device: cuda, world_size: $NGPU}
knobs: {lr: 0.001, clip_norm: 1.0}
env: {NCCL_ALGO: Ring}
YAML
  step "ddp_${NGPU}_gpus" 300 bash -c "autotune probe --space '$OUT/ddp.yaml' --config midpoint --json > '$OUT/ddp.json'"
  python3 - "$OUT/ddp.json" >> "$T" <<'PY' || row ddp_rank_env failed "no summary to read"
import json, sys
s = json.load(open(sys.argv[1]))
seen = [(e or {}).get("NCCL_ALGO") for e in s.get("rank_env") or []]
print(f"| ddp_rank_env | world {s.get('world_size')}, {s.get('status')} | NCCL_ALGO read back per rank: {seen} |")
PY
else
  row ddp "skipped" "one GPU: the DDP probe needs two or more"
fi
echo; cat "$T"
