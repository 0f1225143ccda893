#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Does ptw's data path keep up? ResNet-18 for 32x32 images on the CPU, DDP over Gloo, 2 ranks, batch 32
# per rank, one intra-op thread per rank, trained side by side in one run on the same generated PNG
# folder (tests/data/make_resnet_images.py: IMAGES 3x32x32 images in 10 classes; torchvision's
# resnet18(num_classes=10) with the CIFAR stem, conv1 3x3 stride 1 and no max-pool, as TorchScript):
#
#   ptw-inline    ptw, run.loader_threads 0 (each batch gathered and augmented in the step)
#   ptw-loader    ptw, run.loader_threads LOADER_THREADS (default 1)
#   python-ddp    torch DDP (gloo, 2 processes started here with MASTER_ADDR/PORT) reading the folder
#                 through DataLoader(ImageFolder, num_workers=1, DistributedSampler) (py_resnet_loader.py)
#
# Both sides: RandomCrop(32, padding 4), horizontal flip, per-channel mean 0.5 / std 0.25, SGD lr 0.05
# momentum 0.9, STEPS timed steps (default 30) after WARMUP (default 3). ptw decodes the folder once
# at load and normalises before padding (docs/data.md); Python decodes every PNG each epoch, in its
# worker process. Reported per configuration: samples/s (ptw: the run summary's throughput, which
# leaves out its warm-up steps; Python: all ranks' samples over the timed steps' wall time) and the
# data share of the step (ptw: the summary's mean step split, data / total, from the run store;
# Python: the time waiting for the next batch over the step time). Each round runs the three in
# another order; the ratios to python-ddp are paired per round, and their medians printed.
#
#   tests/bench/resnet_loader.sh [rounds=1]      (about 4 minutes a round on 2 cores, 3 with STEPS=20 WARMUP=2)
#
# The run is kept as tests/bench/results/loader-<date>-<commit>.json with its machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ptw=${PTW:-$root/build/bin/ptw}
rounds=${1:-1}
steps=${STEPS:-30}
warmup=${WARMUP:-3}
images=${IMAGES:-640}
loader_threads=${LOADER_THREADS:-1}
[ -x "$ptw" ] || { echo "bench: $ptw not built; run the README's build first" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$root/tests/data/make_resnet_images.py" "$out" "$images"
# The Python peer runs the OpenBLAS kernels ptw's ranks run (as bench_ddp.sh; Note [BLAS kernels]).
blas_core=$("${PTW_WORKER:-$(dirname "$ptw")/ptw-worker}" --blas 2>/dev/null | sed -n 's/.*"openblas_core": "\([^"]*\)".*/\1/p') || blas_core=""
py_env=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
[ -n "$blas_core" ] && py_env+=(OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$blas_core}")

sets=(--set model.kind=torchscript --set "model.path=$out/resnet18.pt" --set model.out_features=10
      --set data.kind=image-folder --set "data.path=$out/images" --set data.samples=0 --set data.task=classification
      --set 'data.mean=[0.5,0.5,0.5]'
      --set 'data.std=[0.25,0.25,0.25]' --set data.crop_padding=4 --set data.flip=true
      --set strategy.kind=ddp --set strategy.ranks=2 --set hyper.batch_size=32
      --set hyper.lr=0.05 --set hyper.momentum=0.9 --set run.threads_per_rank=1)
# ptw's throughput leaves out a tenth of max_steps as warm-up (at most 10): WARMUP of STEPS + WARMUP.
max_steps=$((steps + warmup))
[ $((max_steps / 10)) -eq "$warmup" ] || echo "bench: ptw leaves out $((max_steps / 10 > 10 ? 10 : max_steps / 10)) warm-up steps, Python $warmup" >&2

samples="$out/samples.jsonl"
ptw_run() {  # impl threads
  "$ptw" --headless --runs-dir "$out/runs" --summary "$out/s.json" "${sets[@]}" --set hyper.max_steps="$max_steps" \
    --set run.loader_threads="$2" >/dev/null 2>"$out/ptw.err" || { cat "$out/ptw.err" >&2; exit 1; }
  /usr/bin/python3 - "$out/s.json" "$1" "$round" >> "$samples" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
split = [r["step_ms"] for r in s["ranks"]]
mean = {k: sum(r[k] for r in split) / len(split) for k in split[0]}
print(json.dumps({"round": int(sys.argv[3]), "impl": sys.argv[2], "samples_per_s": s["throughput"]["samples_per_s"],
                  "data_share": mean["data"] / mean["total"], "step_ms": mean}))
PY
}
py_run() {
  local attempt port line=""
  # A port the system says is free may be taken before rank 0 binds it: bounded by timeout, tried again.
  for attempt in 1 2 3; do
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    line=$(for r in 1 0; do env "${py_env[@]}" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$r WORLD_SIZE=2 \
             timeout 900 /usr/bin/python3 "$here/py_resnet_loader.py" "$out/images" "$steps" "$warmup" 32 & done; wait) || true
    line=$(echo "$line" | grep '"impl"' | head -1)
    [ -n "$line" ] && break
    echo "bench: Python DDP on port $port failed (attempt $attempt of 3)" >&2
  done
  [ -n "$line" ] || { echo "bench: Python DDP failed three times" >&2; exit 1; }
  echo "$line" | /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin); r["round"] = int(sys.argv[1]); print(json.dumps(r))' "$round" >> "$samples"
}

runs=('ptw_run ptw-inline 0' "ptw_run ptw-loader $loader_threads" 'py_run')
for ((round = 0; round < rounds; round++)); do
  for ((k = 0; k < 3; k++)); do
    echo "bench: round $((round + 1))/$rounds: ${runs[(round + k) % 3]}" >&2
    eval "${runs[(round + k) % 3]}"
  done
done

/usr/bin/python3 - "$samples" "$here/results" "$rounds" "$steps" "$warmup" "$images" "$loader_threads" <<'PY'
import datetime, json, os, statistics, subprocess, sys
path, results, rounds, steps, warmup, images, threads = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
by = {}
for r in rows:
    by.setdefault(r["round"], {})[r["impl"]] = r
ratio = lambda impl: statistics.median(b[impl]["samples_per_s"] / b["python-ddp"]["samples_per_s"] for b in by.values())
share = lambda impl: statistics.median(b[impl]["data_share"] for b in by.values())
sps = lambda impl: statistics.median(b[impl]["samples_per_s"] for b in by.values())
impls = ["ptw-inline", "ptw-loader", "python-ddp"]
print("| configuration | samples/s | ratio to python-ddp | data share of the step |")
print("|---|---:|---:|---:|")
for impl in impls:
    print("| %s | %.1f | %.3f | %.2f%% |" % (impl, sps(impl), ratio(impl), 100 * share(impl)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                        cwd=results).stdout.strip()
now = datetime.datetime.now(datetime.timezone.utc)
kept = {"target": "resnet-loader", "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit,
        "machine": "%d cores, %s" % (os.cpu_count(), cpu),
        "method": "ResNet-18 (CIFAR stem) TorchScript, DDP gloo, 2 ranks x 1 intra-op thread, batch 32/rank, "
                  "%s timed steps after %s, %s PNGs 3x32x32; ptw loader_threads 0 vs %s; python DataLoader "
                  "num_workers=1 (tests/bench/resnet_loader.sh)" % (steps, warmup, images, threads),
        "rounds": int(rounds),
        "median_ratio_to_python": {i: round(ratio(i), 4) for i in impls[:2]},
        "median_data_share": {i: round(share(i), 5) for i in impls},
        "median_samples_per_s": {i: round(sps(i), 2) for i in impls},
        "samples": rows}
os.makedirs(results, exist_ok=True)
name = os.path.join(results, "loader-%s-%s.json" % (now.strftime("%Y%m%dT%H%M%SZ"), commit))
with open(name, "w") as f:
    json.dump(kept, f, indent=1)
print("bench: kept as %s" % os.path.relpath(name), file=sys.stderr)
PY
