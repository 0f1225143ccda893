#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# GPU checks: builds the engine, the worker and the headless runner against a CUDA LibTorch
# (no Qt needed) and checks every CUDA path against a reference run, on a machine with at least
# one CUDA GPU. The CPU suite (ctest) cannot reach these paths; this script is their test.
#
#   tests/gpu/gpu_checks.sh [build-dir=build-gpu]        (BUILD=0 checks an existing build)
#
# LibTorch: Torch_DIR, else the CMake folder of python3's torch. Other packages (nlohmann-json,
# CLI11, SQLite) come from the system or CMAKE_PREFIX_PATH. python3 compares the runs' CSVs; with
# torch and CUDA it also runs the Python baseline. Prints one line per check,
# PASS or FAIL with the numbers compared, then throughput figures; exits 1 if any check fails,
# 2 if the build fails or there is no CUDA device. Every run's log and CSV stay in <build-dir>/gpu-checks.
#
# Checks (model: MLP 32-256-256-10, cross-entropy, SGD momentum 0.9, batch 64, 200 steps):
#   devices        ptw-worker --devices lists a CUDA device
#   cuda=cpu       Single on cuda:0 follows Single on the CPU step by step within 1e-4 (fp32; TF32 is off)
#                  over the first 60 steps; rounding differences, tiny at first, grow with this
#                  learning rate until the runs part ways some steps later
#   nccl=single    DDP over NCCL, 1 rank: every step's loss equals Single's on cuda:0
#   gloo=single    DDP over Gloo with CUDA tensors, 1 rank: the same (gloo-absent where LibTorch came
#                  without gloo's headers, as pip wheels do: the run fails at once and says so)
#   dp=single      DataParallel with 1 lane on cuda:0: the same
#   loader=single  Single on cuda:0 with run.loader_threads 2 (batches in pinned memory, copied with
#                  non_blocking): the same
#   bf16           bf16 autocast trains: its final loss is within 10% (+0.02) of fp32's and
#                  under half the first step's
#   memory         a CUDA rank reports the CUDA allocator's bytes at every step (at least 3 x the parameters'
#                  bytes, under 256 MiB; never the process's resident set)
#   too-few-gpus   DDP with one rank more than there are GPUs fails at once, naming the field
#                  and the device it lacks, and leaves no worker behind
#   gpus=[N-1]     Single with strategy.gpus naming the last GPU runs there (its rank's log says so);
#                  on a one-GPU machine it also equals Single on cuda:0 at every step (gpus=[0]=single),
#                  and so cannot tell the listed GPU from the default there; gpus-absent can
#   gpus-absent    strategy.gpus naming a GPU past the last fails at once, naming the field
#   resume         rank 0 killed after step 50 of a CUDA DDP run (checkpoint every 20, one restart):
#                  the run finishes, and every step's loss equals the uninterrupted run's
#   sweep          `ptw sweep` on cuda (Single, DataParallel, DDP; 1 worker) finishes every configuration
# Then throughput on the mlp workload (784-512-512-10, batch 128): ptw on the CPU and the GPU, and the
# same model in PyTorch from Python on the GPU, measured in the same run (not checks).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-gpu}
work=$build/gpu-checks
mkdir -p "$work"
failures=0

torch_dir=${Torch_DIR:-$(python3 -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))' 2>/dev/null)}
if [ "${BUILD:-1}" = 1 ]; then  # BUILD=0: check an existing build
  [ -n "$torch_dir" ] && [ -d "$torch_dir" ] || { echo "gpu-checks: no LibTorch CMake folder (set Torch_DIR)" >&2; exit 2; }
  echo "gpu-checks: LibTorch CMake folder $torch_dir"
  generator=Ninja; command -v ninja >/dev/null || generator="Unix Makefiles"
  if ! cmake -S "$root" -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTW_BUILD_GUI=OFF \
         -DPTW_BUILD_TESTS=OFF -DTorch_DIR="$torch_dir" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >"$work/configure.log" 2>&1; then
    tail -40 "$work/configure.log"; echo "gpu-checks: configure failed" >&2; exit 2
  fi
  grep "ptw: LibTorch" "$work/configure.log"
  grep -q "CUDA paths: ON" "$work/configure.log" || { echo "gpu-checks: this LibTorch has no CUDA" >&2; exit 2; }
  start=$(date +%s)
  keep_going=(-k); [ "$generator" = Ninja ] && keep_going=(-k 0)  # every error at once, not the first
  if ! cmake --build "$build" --parallel "$(nproc)" -- "${keep_going[@]}" >"$work/build.log" 2>&1; then
    grep -E -A3 "error" "$work/build.log" | head -80; echo "gpu-checks: build failed" >&2; exit 2
  fi
  echo "gpu-checks: built in $(( $(date +%s) - start )) s"
fi
ptw=$build/bin/ptw
export PTW_WORKER=$build/bin/ptw-worker PTW_RUNS_DIR=$work/runs

check() {  # name status(0 = passed) detail
  if [ "$2" -eq 0 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; failures=$((failures + 1)); fi
}

base=(--set model.kind=mlp --set model.in_features=32 --set 'model.hidden=[256,256]' --set model.out_features=10
      --set data.kind=synthetic-classification --set data.samples=4096 --set data.seed=1 --set data.noise=2.0
      --set hyper.lr=0.05 --set hyper.momentum=0.9 --set hyper.batch_size=64 --set hyper.max_steps=200
      --set hyper.seed=3 --set strategy.ranks=1)

run() {  # name args...: a headless run; its summary and every step as CSV in $work/name.*
  local name=$1 t0; shift
  t0=$(date +%s.%N)
  rm -f "$work/$name.json" "$work/$name.csv"
  # A rank silent for 30 s is reported stalled; `timeout` bounds a run that hangs anyway (exit 124).
  timeout 150 "$ptw" --headless "${base[@]}" --set run.timeout_s=30 "$@" --summary "$work/$name.json" >"$work/$name.log" 2>&1
  local rc=$?
  local id
  echo "  run $name: exit $rc, $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s"
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/$name.json" 2>/dev/null)
  [ -n "$id" ] && "$ptw" export "$id" --csv "$work/$name.csv" >/dev/null 2>&1
  return $rc
}

# compare A B tolerance [last-step]: max over steps of |loss_a - loss_b| / max(1, |loss_a|) for rank 0.
compare() {
  python3 - "$work/$1.csv" "$work/$2.csv" "$3" "${4:-0}" <<'EOF'
import csv, sys
def losses(path):
    out = {}
    for row in csv.DictReader(open(path)):
        if row["rank"] == "0":
            out[int(row["step"])] = float(row["loss"])  # a restarted step keeps its last value
    last = int(sys.argv[4])
    return {s: v for s, v in out.items() if last == 0 or s <= last}
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if not a or sorted(a) != sorted(b):
    print(f"steps differ: {len(a)} against {len(b)}"); sys.exit(1)
worst = max(abs(a[s] - b[s]) / max(1.0, abs(a[s])) for s in a)
print(f"{len(a)} steps, max relative loss difference {worst:.3g} (tolerance {tol:g}); final {a[max(a)]:.6f} / {b[max(b)]:.6f}")
sys.exit(0 if worst <= tol else 1)
EOF
}

equal() {  # check-name run reference tolerance exit-code-of-run [last-step]
  local detail same
  detail=$(compare "$3" "$2" "$4" "${6:-0}"); same=$?
  [ "$5" -eq 0 ] && [ $same -eq 0 ]; check "$1" $? "exit $5; $detail"
}

field() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"j": j}))' "$work/$1.json" "$2"; }

# devices
devices=$("$PTW_WORKER" --devices 2>&1)
echo "$devices" | sed 's/^/  /'
echo "$devices" | grep -q '"kind": "cuda"'; check devices $? "$(echo "$devices" | grep -c '"kind": "cuda"') CUDA device(s)"
gpus=$(echo "$devices" | grep -c '"kind": "cuda"')
[ "$gpus" -gt 0 ] || { echo "gpu-checks: LibTorch sees no CUDA device here; nothing else to check" >&2; exit 2; }

run single-cpu --set strategy.kind=single --set strategy.device=cpu
run single-cuda --set strategy.kind=single --set strategy.device=cuda; rc=$?
equal "cuda=cpu" single-cuda single-cpu 1e-4 $rc 60

run nccl --set strategy.kind=ddp --set strategy.backend=nccl --set strategy.device=cuda; rc=$?
equal "nccl=single" nccl single-cuda 1e-6 $rc
grep -h "backend\|error" "$work/nccl.log" | head -3 | sed 's/^/  /'

run gloo --set strategy.kind=ddp --set strategy.backend=gloo --set strategy.device=cuda; rc=$?
if grep -q "Gloo: OFF" "$work/configure.log" 2>/dev/null; then  # a LibTorch without gloo's headers
  grep -q 'this build of ptw has no Gloo' "$work/gloo.log"; named=$?
  [ $rc -ne 0 ] && [ $named -eq 0 ]; check "gloo-absent" $? "exit $rc; $(grep -m1 -o 'strategy.backend: .*' "$work/gloo.log")"
else
  equal "gloo=single" gloo single-cuda 1e-6 $rc
fi

run dp --set strategy.kind=dataparallel --set strategy.device=cuda; rc=$?
equal "dp=single" dp single-cuda 1e-6 $rc

run loader --set strategy.kind=single --set strategy.device=cuda --set run.loader_threads=2; rc=$?
equal "loader=single" loader single-cuda 1e-6 $rc

run bf16 --set strategy.kind=single --set strategy.device=cuda --set hyper.precision=bf16; rc=$?
verdict=$(python3 - "$work/single-cuda.csv" "$work/bf16.csv" <<'EOF'
import csv, sys
def losses(path):
    return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(path)) if r["rank"] == "0"}
fp, bf = losses(sys.argv[1]), losses(sys.argv[2])
last = max(bf)
ok = bf[last] <= 1.1 * fp[max(fp)] + 0.02 and bf[last] < 0.5 * bf[min(bf)]
print(("ok" if ok else "bad") + f": bf16 first {bf[min(bf)]:.4f} final {bf[last]:.4f}; fp32 final {fp[max(fp)]:.4f}")
EOF
)
[ $rc -eq 0 ] && [[ $verdict == ok* ]]; check bf16 $? "exit $rc; $verdict"

read -r mem_min mem_max < <(python3 -c 'import csv,sys
m = [int(r["mem_bytes"]) for r in csv.DictReader(open(sys.argv[1]))]; print(min(m), max(m))' "$work/single-cuda.csv" 2>/dev/null)
params=$(( (32*256 + 256 + 256*256 + 256 + 256*10 + 10) * 4 ))
# Every step's: parameters, gradients and momentum at least, plus cuBLAS's workspace (tens of MiB);
# a LibTorch process's resident set (what a CPU rank reports) is above 256 MiB, so a first step that
# reported it instead of the allocator's figure fails.
[ -n "$mem_max" ] && [ "$mem_min" -ge $((3 * params)) ] && [ "$mem_max" -lt $((256 << 20)) ]
check memory $? "mem_bytes ${mem_min:-none} to ${mem_max:-none} over the run (parameters alone: $params bytes)"

# One rank more than there are GPUs.
begin=$(date +%s.%N)
run too-few --set strategy.kind=ddp --set strategy.device=cuda --set strategy.ranks=$((gpus + 1)); rc=$?
took=$(python3 -c "import sys; print(f'{$(date +%s.%N) - $begin:.1f}')")
left=$(pgrep -f "$PTW_WORKER" | wc -l)
grep -q "strategy.device: rank/lane $gpus needs cuda:$gpus" "$work/too-few.log"; named=$?
[ $rc -ne 0 ] && [ $named -eq 0 ] && [ "$left" -eq 0 ]
check too-few-gpus $? "exit $rc after $took s; workers left $left; $(grep -m1 -o "strategy.device: rank/lane.*" "$work/too-few.log")"

# A GPU picked by index: the rank's log names the GPU the engine took (the last one), and on a one-GPU
# machine the run equals Single's on cuda:0 at every step. One past the last fails at once naming the field.
last_gpu=$((gpus - 1))
run gpu-picked --set strategy.kind=single --set strategy.device=cuda --set "strategy.gpus=[$last_gpu]"; rc=$?
rank_log="$(field gpu-picked 'j["run_dir"]' 2>/dev/null)/rank0.log"
took=$(grep -m1 -o 'device cuda:[0-9]*' "$rank_log" 2>/dev/null)
[ $rc -eq 0 ] && [ "$took" = "device cuda:$last_gpu" ]; check "gpus=[$last_gpu]" $? "exit $rc; rank 0's log: ${took:-no device line}"
[ "$gpus" -eq 1 ] && equal "gpus=[0]=single" gpu-picked single-cuda 1e-6 $rc
run gpu-absent --set strategy.kind=single --set strategy.device=cuda --set "strategy.gpus=[$gpus]"; rc=$?
grep -q "strategy.gpus: rank/lane 0 is given cuda:$gpus but this machine has $gpus" "$work/gpu-absent.log"; named=$?
[ $rc -ne 0 ] && [ $named -eq 0 ]; check gpus-absent $? "exit $rc; $(grep -m1 -o 'strategy.gpus: .*' "$work/gpu-absent.log")"

# A rank killed on the GPU, restarted from its checkpoint.
run resume-whole --set strategy.kind=ddp --set strategy.device=cuda --set run.checkpoint_every=20
run resume-killed --worker-arg=--fault=kill-at-step:0:50 --set strategy.kind=ddp --set strategy.device=cuda \
  --set run.checkpoint_every=20 --set run.max_restarts=1; rc=$?
attempts=$(field resume-killed 'j["attempts"]' 2>/dev/null)
echo "  resume: $(field resume-killed 'j["attempts"]' 2>/dev/null) attempt(s); $(grep -m1 -i "restart" "$work/resume-killed.log")"
[ "$attempts" = 2 ]; equal resume resume-killed resume-whole 1e-6 $(( rc | $? ))

# The scaling sweep on the GPU: Single, DataParallel and DDP (NCCL) with one worker each, all finished.
timeout 300 "$ptw" sweep "${base[@]}" --set strategy.device=cuda --strategies dataparallel,ddp --workers 1 \
  --steps 100 --csv "$work/sweep.csv" >"$work/sweep.log" 2>&1; rc=$?
rows=$(python3 -c 'import csv, sys
print(" ".join("%s:%s:%.0f" % (r["strategy"], r["status"], float(r["samples_per_s"])) for r in csv.DictReader(open(sys.argv[1]))))' \
       "$work/sweep.csv" 2>/dev/null)
[ $rc -eq 0 ] && [ "$(echo "$rows" | grep -o ':finished:[1-9]' | wc -l)" -eq 3 ]; check sweep $? "exit $rc; $rows"

# Throughput: the issue's mlp workload (784-512-512-10, batch 128), 300 steps each.
echo "throughput (samples/s, mlp 784-512-512-10, batch 128, 300 steps):"
mlp=(--set model.in_features=784 --set 'model.hidden=[512,512]' --set hyper.batch_size=128 --set hyper.max_steps=300
     --set data.samples=8192)
for row in "cpu-single strategy.kind=single strategy.device=cpu hyper.precision=fp32" \
           "cuda-single strategy.kind=single strategy.device=cuda hyper.precision=fp32" \
           "cuda-single-bf16 strategy.kind=single strategy.device=cuda hyper.precision=bf16" \
           "cuda-ddp-nccl strategy.kind=ddp strategy.device=cuda hyper.precision=fp32"; do
  set -- $row; name=$1; shift
  sets=(); for s in "$@"; do sets+=(--set "$s"); done
  run "tp-$name" "${mlp[@]}" "${sets[@]}"
  printf '  %-18s %s\n' "$name" "$(field "tp-$name" 'round(j["throughput"]["samples_per_s"])' 2>/dev/null)"
done

# The same model in PyTorch from Python (where python3 has torch with CUDA), as a baseline measured in this
# run: "like ptw" draws each batch from a CPU dataset, copies it over and reads the loss every step, as a
# ptw rank does for its records; "free-running" keeps one batch on the GPU and synchronises only at the end.
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  python3 - <<'PY' 2>&1 | sed 's/^/  /' | tee "$work/python.txt"
import time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
steps, batch, dev = 300, 128, "cuda"
X, Y = torch.randn(8192, 784), torch.randint(0, 10, (8192,))
def make():
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
def like_ptw(model, opt):
    idx = torch.randint(0, 8192, (batch,))
    x, y = X.index_select(0, idx).to(dev), Y.index_select(0, idx).to(dev)
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()
xg, yg = X[:batch].to(dev), Y[:batch].to(dev)
def free_running(model, opt):
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(xg), yg).backward()
    opt.step()
for name, step in (("python-like-ptw", like_ptw), ("python-free-running", free_running)):
    model, opt = make()
    for _ in range(20): step(model, opt)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps): step(model, opt)
    torch.cuda.synchronize()
    print(f"{name:<20} {round(steps * batch / (time.perf_counter() - t0))}")
PY
  ptw_rate=$(field tp-cuda-single 'j["throughput"]["samples_per_s"]' 2>/dev/null)
  py_rate=$(awk '/python-like-ptw/ {print $2}' "$work/python.txt")
  [ -n "$ptw_rate" ] && [ -n "$py_rate" ] &&
    echo "  ptw cuda-single / python-like-ptw: $(python3 -c "print(round($ptw_rate / $py_rate, 2))")"
fi

echo "gpu-checks: $failures check(s) failed"
[ $failures -eq 0 ]
