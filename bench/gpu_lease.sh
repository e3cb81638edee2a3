#!/usr/bin/env bash
# One lease of a lent GPU in one command. A lent machine gives a session 15 minutes of device time, its start and
# idle waits included, and at most 10 minutes a command, so each lease is one prepared run that writes what it has
# finished under $OUT as it goes (a run killed at its limit keeps it).
#
#   bench/gpu_lease.sh speed            on the GPU machine, from the repository root; results under $OUT
#   bench/gpu_lease.sh speed --smoke    the same steps at tiny shapes on this CPU (tests/test_bench_accelerator.py)
#   bench/gpu_lease.sh tuning [--smoke] our step's variants (loop rolled, Triton GEMMs off) and XLA's program
#
# speed: bench/accelerator.py for ALBERT-xxlarge and -base at 512 and 128 with XLA's and cuDNN's attention against
# HF in the same process, the attention check, and a profile of our step wherever a target is missed. The batches
# are named, not searched: each search trial compiles both frameworks' steps, more than a lease holds. They are
# sized for 45% of an 80 GiB H100 each (XLA attention keeps the probabilities: about 2 GiB a sequence for xxlarge
# at 512).
#
# Where the machine lacks packages (no network there), carry them as wheels in .whl (../shared/gpu/wheels.sh): they
# are installed to /tmp/site first. Files that come back: lease.log, environment.txt, accelerator.json/.md and the
# Perfetto traces of up to two profiled rows (open them in ui.perfetto.dev).
set -uo pipefail
cd "$(dirname "$0")/.."
lease=${1:?usage: bench/gpu_lease.sh speed [--smoke]}
smoke=${2:-}
out=${OUT:-/tmp/albert_jax_lease}
python=${PYTHON:-python3}
mkdir -p "$out"
exec > >(tee -a "$out/lease.log") 2>&1

if [[ "$smoke" != --smoke ]] && compgen -G '.whl/*.whl' >/dev/null; then  # the device's wheels, not this CPU's
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_lease: installing the carried wheels failed" >&2; exit 2; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1

{ date -u +%FT%TZ; nvidia-smi 2>/dev/null || echo 'no nvidia-smi'
  "$python" -c 'import sys, jax, flax, optax, torch, transformers
print("python", sys.version.split()[0], "jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__,
      "torch", torch.__version__, "transformers", transformers.__version__, "devices", jax.devices())'
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

case "$lease" in
  speed)
    profile=/tmp/albert_jax_lease_profile
    rm -rf "$profile"
    if [[ "$smoke" == --smoke ]]; then
      # Tiny shapes on the CPU: every row profiled, HF eager, a batch named for one length and a default for the
      # other, as on the GPU.
      JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES='' timeout 300 "$python" bench/accelerator.py --smoke \
        --configs=tiny_albert_deep --seq_lens=32,16 --batch=2,tiny_albert_deep@32:4 \
        --rounds=1 --steps=1 --torch_compile=off --profile="$profile" --out="$out"
    else
      # xxlarge (the MFU target) first, then base; 9 minutes at most, so that the traces are copied inside a
      # 10-minute command (on an H200 on 2026-11-26 the whole lease took 5).
      timeout 540 "$python" bench/accelerator.py --configs=xxlarge,base --seq_lens=512,128 \
        --batch=xxlarge@512:16,xxlarge@128:64,base@512:64,base@128:256 --check_attention --profile="$profile" \
        --out="$out"
    fi
    status=$?
    n=0
    for trace in $(find "$profile" -name perfetto_trace.json.gz -size -15M 2>/dev/null | sort -r); do
      row=$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$trace")")")")")
      cp "$trace" "$out/profile_${row}.json.gz"
      n=$((n + 1)); [[ $n -ge 2 ]] && break
    done
    ;;
  tuning)
    # Why our step is where it is: the step (cuDNN attention, at 512) as `speed` measures it, with XLA's optimized
    # program dumped; then with the encoder's loop rolled (scan_unroll 1: a GPU unrolls it by default), then with
    # XLA's Triton GEMMs off, each a process of its own (XLA reads its flags once). HF is compiled in the first only:
    # the variants are judged against its step.
    dump=/tmp/albert_jax_lease_hlo
    rm -rf "$dump"
    if [[ "$smoke" == --smoke ]]; then
      common=(--smoke --configs=tiny_albert --seq_lens=32 --batch=2 --rounds=1 --steps=1 --torch_compile=off)
      export JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES=''
    else
      common=(--configs=base,xxlarge --seq_lens=512 --attention=cudnn --batch=base:64,xxlarge:16 --no-check_attention)
    fi
    XLA_FLAGS="--xla_dump_to=$dump --xla_dump_hlo_module_re=.*train_step.*" timeout 170 "$python" \
      bench/accelerator.py "${common[@]}" --out="$out/baseline"
    status=$?
    tar -czf "$out/hlo.tgz" -C "$dump" . 2>/dev/null
    timeout 150 "$python" bench/accelerator.py "${common[@]}" --torch_compile=off --scan_unroll=1 --out="$out/rolled"
    if [[ "$smoke" != --smoke ]]; then  # a GPU's flag: on a CPU it would time the baseline's program again
      XLA_FLAGS=--xla_gpu_enable_triton_gemm=false timeout 120 "$python" bench/accelerator.py "${common[@]}" \
        --torch_compile=off --out="$out/no_triton_gemm"
    fi
    rm -f "$out"/*/accelerator.md  # printed in lease.log; at most 8 files come back
    ;;
  *) echo "gpu_lease: unknown lease '$lease'; known: speed, tuning" >&2; exit 2 ;;
esac
echo "gpu_lease: $lease finished with status $status; files: $(ls "$out" | tr '\n' ' ')"
exit "$status"
