#!/usr/bin/env bash
# Tensor parallelism on two or four GPUs (docs/parallel.md): the TP tests, then decode at TP=1,
# TP=2 (and TP=4) for a Llama-3-8B shape and a 70B-widths shape with fewer layers. Prints a table and
# writes it, with every run's output, to $OUT (default build/gpu-tp).
#
#   bench/gpu_tp.sh [--bin DIR|FILE.tar.xz] [--only tests,forward,weft] [--shapes 8b,70b]
#                   [--layers-70b N] [--batches 1,8,32,64,128,256] [--tokenizer DIR]
#                   [--tp 1,2,4] [--nccl-env "K=V ..."]... [--variant-batches 1,64]
#                   [--variant-tp N] [--variant-shape 8b|70b] [--test-filter PATTERN]
#
# --tp: the tensor-parallel sizes the forward and weft phases run (default 1,2, and 1,2,4 where
#   4 GPUs are visible: nvidia-h100-x4); sizes above the GPU count are dropped. With 4 GPUs the
#   tests phase also runs the TP tests over 4 ranks, `weft generate --tensor-parallel 4` on the
#   fixtures against one GPU, and the hybrid TP=2 x PP=2 with one rank per GPU.
# --variant-tp: the TP size of the variants phase (default 2).
# --variant-shape: the shape of the variants phase (default 8b; 70b takes --layers-70b).
# --test-filter: a GoogleTest filter for the tests phase's binaries (--gtest_filter), e.g.
#   '*Fused*' for the fused all-reduce + norm's tests alone (NcclFusedNorm.*, FusedNorm*/*).
#   GPU_TP_HYBRID=0 skips the tests phase's hybrid TP x PP check.
#
# --bin: the prebuilt binaries: DIR/bin (weft, cuda_forward_bench, cuda_tensor_parallel_test,
#   nccl_communicator_test), DIR/lib (their shared libraries) and DIR/openmpi (Open MPI for a
#   machine without it: scripts/stage-openmpi DIR/openmpi); scripts/gpu-check --stage makes all
#   three in .devcarry/gpu, the default. A .tar.xz/.tar.gz of such a folder is unpacked first.
#   Without DIR/openmpi, the mpirun on PATH.
# --only: a subset of the phases, to fit a device call's 10 minutes (each phase takes about
#   3-5 minutes; weft's models are made once per machine and kept in /tmp):
#   tests    mpirun -np 2 nccl_communicator_test and cuda_tensor_parallel_test (every fixture
#            model over 2 GPUs against 1 GPU)
#   forward  cuda_forward_bench at TP=1 and TP=2 on random in-memory weights: decode ms/step
#            and tokens/s at each batch (context 512), prefill 512
#   weft     weft bench at TP=1 and TP=2 on random model folders (bench/make_random_model.py,
#            torch on the GPU; the Llama-3 tokenizer from --tokenizer, default .devcarry/l3 as
#            in bench/gpu_8b.sh): batch 1 (8 requests one at a time, 128 in / 128 out) and
#            batch 64 (256 requests, 64 at a time, 512 in / 128 out), output tok/s
# --shapes: 8b (Llama-3-8B: 32 layers, 16 GB of bf16) and 70b (Llama-3-70B's widths: hidden
#   8192, 64 heads, 8 kv heads, intermediate 28672, 128K untied head, with --layers-70b
#   layers, default 10: 21 GB, so TP=1 fits one H100 to compare against; 80 layers would be
#   141 GB).
#
# With the device tool (no internet there):
#   here:  scripts/gpu-check --stage        (binaries, libraries and Open MPI into .devcarry/gpu)
#          Llama-3 tokenizer into .devcarry/l3 (bench/gpu_8b.sh says how)
#   there: run(kind="nvidia-h100-x2", carry=[".devcarry/gpu", ".devcarry/l3"],
#              command="bash bench/gpu_tp.sh --only tests,forward")
#          run(... command="bash bench/gpu_tp.sh --only weft")
# --nccl-env "K=V ...": one variant of the environment for the TP=2 ranks (repeat the option for
#   more): after the phases above, cuda_forward_bench runs at TP=1 once and at TP=2 once with
#   the default environment and once per variant, at --variant-batches (default 1,64), shape
#   8b, with --profile (device ms per step in the all-reduces and the head's all-gather, from
#   plain launches with events), and prints one table: variant x batch ms/step, speedup over
#   TP=1, all-reduce ms/step. Any variable may be set, e.g.
#     --nccl-env "NCCL_PROTO=LL" --nccl-env "NCCL_PROTO=LL128" --nccl-env "NCCL_PROTO=Simple"
#     --nccl-env "NCCL_ALGO=Tree" --nccl-env "NCCL_MIN_NCHANNELS=4 NCCL_MAX_NCHANNELS=4"
#   and Weft's switches for the CUDA forward pass under tensor parallelism (docs/parallel.md):
#     WEFT_TP_OVERLAP=0 (the next qkv's L2 prefetch after down's all-reduce, not beside it),
#     WEFT_TP_PREFETCH_MB=N (MB prefetched beside each all-reduce; default 16, 0: the
#     single-GPU 8), WEFT_TP_VOCAB_PARALLEL=0 (the whole head on every rank),
#     WEFT_L2_PREFETCH_MB=0 (no L2 prefetch at all).
#   Each run builds its random weights again (about a minute): four or five variants fit a
#   device call's 10 minutes with --only variants.
#   and where the collectives' buffers live (docs/parallel.md, "NCCL buffers"):
#     WEFT_TP_NCCL_BUFFERS=symmetric (NCCL symmetric windows: its low-latency symmetric kernels,
#     no multicast needed on NVLink), WEFT_TP_NCCL_BUFFERS=registered (ncclCommRegister),
#     WEFT_TP_SYMMETRIC_FENCE=0 (drop the fence kernel before each symmetric collective, to
#     measure what it costs; its results are not guaranteed on NCCL before 2.30.7),
#     WEFT_TP_NCCL_HEAD_ROWS=N (rows of the head's all-gather in the window, default 64),
#     NCCL_SYM_KERNEL=AllReduce_AGxLL_R (force one of NCCL's symmetric kernels).
#   and the fused all-reduce + residual add + norm over NCCL's device API (docs/parallel.md,
#   "Fused all-reduce and norm"): WEFT_TP_FUSED_NORM=1 (0: NCCL's all-reduce; unset: fused
#   for groups of two and four ranks, so their "default" rows are fused), WEFT_TP_FUSED_ROWS=N
#   (steps of up to N tokens fused; unset: 256 for two ranks, 64 for more); its
#   profile line is "fused all-reduce + norm" (counted in the collectives column, with the
#   norm it replaces).
#   The table's last lines say where each variant's collectives ran (a refused request, why).
#   Issue #20's comparison, in two device calls (each within 10 minutes):
#     bash bench/gpu_tp.sh --bin B --only tests
#     bash bench/gpu_tp.sh --bin B --only variants --nccl-env "NCCL_PROTO=LL" \
#       --nccl-env "WEFT_TP_NCCL_BUFFERS=symmetric" \
#       --nccl-env "WEFT_TP_NCCL_BUFFERS=symmetric WEFT_TP_SYMMETRIC_FENCE=0" \
#       --nccl-env "WEFT_TP_NCCL_BUFFERS=registered"
#   The fused path against NCCL's, in one call (tests first: the kernel against NCCL's
#   all-reduce + add_norm, and every fixture fused against one GPU):
#     bash bench/gpu_tp.sh --bin B --only tests,variants --nccl-env "WEFT_TP_FUSED_NORM=0" \
#       --nccl-env "WEFT_TP_FUSED_NORM=1" --nccl-env "WEFT_TP_FUSED_NORM=0 WEFT_TP_NCCL_BUFFERS=symmetric"
# NCCL_NVLS_ENABLE=0 is exported (NVLink multicast must stay off on those machines); a variant
# cannot turn it on.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-build/gpu-tp}
mkdir -p "$OUT"
BIN=.devcarry/gpu
ONLY=tests,forward,weft
SHAPES=8b,70b
LAYERS_70B=10
BATCHES=1,8,32,64,128,256
TOKENIZER=.devcarry/l3
VARIANTS=()
VARIANT_BATCHES=1,64
TPS=
VARIANT_TP=2
VARIANT_SHAPE=8b
TEST_FILTER=
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --layers-70b) LAYERS_70B=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --nccl-env) VARIANTS+=("$2"); shift 2 ;;
    --variant-batches) VARIANT_BATCHES=$2; shift 2 ;;
    --tp) TPS=$2; shift 2 ;;
    --variant-tp) VARIANT_TP=$2; shift 2 ;;
    --variant-shape) VARIANT_SHAPE=$2; shift 2 ;;
    --test-filter) TEST_FILTER=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "gpu_tp.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
# The variants phase runs when variants are given (--only may name it alone: --only variants).
[ ${#VARIANTS[@]} -gt 0 ] && ONLY=$ONLY,variants
for v in "${VARIANTS[@]}"; do
  for kv in $v; do
    case "$kv" in
      NCCL_NVLS_ENABLE=*) echo "gpu_tp.sh: --nccl-env: NCCL_NVLS_ENABLE stays 0 on these machines" >&2; exit 2 ;;
      [A-Za-z_]*=*) ;;
      *) echo "gpu_tp.sh: --nccl-env: '$kv' in \"$v\" is not NAME=VALUE" >&2; exit 2 ;;
    esac
  done
done

t0=$(date +%s)
stamp() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }

# The binaries: a folder, or a tarball of one.
case "$BIN" in
  *.tar.xz|*.tar.gz|*.tgz)
    dir=/tmp/weft-gpu-tp-bin
    rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xf "$BIN" || { echo "gpu_tp.sh: cannot unpack $BIN" >&2; exit 1; }
    # The tarball may hold the folder itself (bin/ at its top) or one folder that does.
    [ -d "$dir/bin" ] || dir=$(dirname "$(find "$dir" -maxdepth 3 -type d -name bin | head -1)")
    BIN=$dir ;;
esac
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "gpu_tp.sh: no folder $BIN (--bin)" >&2; exit 1; }
B=$BIN/bin
[ -d "$B" ] || B=$BIN
pylib() { python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null || true; }
cublas_dir=$(pylib cublas)
# NCCL is opened at run time (libnccl.so.2): the system's (/lib/x86_64-linux-gnu) or the CUDA
# toolkit's, else PyTorch's wheel's. NCCL_DEBUG=VERSION (unless set) logs which version ran.
nccl_dir=
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_dir=$(pylib nccl)
fi
export NCCL_DEBUG=${NCCL_DEBUG:-VERSION}
export LD_LIBRARY_PATH="$BIN/lib:$BIN/openmpi/lib:/usr/local/cuda/lib64${cublas_dir:+:$cublas_dir}${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export WEFT_SPEC_DIR=$ROOT/config/models WEFT_TEST_SOURCE_DIR=$ROOT
export NCCL_NVLS_ENABLE=0
if [ -x "$BIN/openmpi/bin/mpirun" ]; then
  # The carried Open MPI, rebased (scripts/stage-openmpi); shared memory between local ranks.
  export OPAL_PREFIX=$BIN/openmpi/prefix PMIX_PREFIX=$BIN/openmpi/pmix
  export PMIX_MCA_mca_base_component_path=$BIN/openmpi/pmix/lib/pmix
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
  MPIRUN=$BIN/openmpi/bin/mpirun
else
  MPIRUN=$(command -v mpirun || true)
fi
[ -n "$MPIRUN" ] || { echo "gpu_tp.sh: no mpirun: stage Open MPI with scripts/stage-openmpi $BIN/openmpi" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks are not pinned to a core: each runs an engine with several threads.
mpi() { echo "$MPIRUN" --oversubscribe --allow-run-as-root --bind-to none -np "$1" -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x LD_LIBRARY_PATH; }
read -ra MPI2 <<<"$(mpi 2)"
read -ra MPI4 <<<"$(mpi 4)"

(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true) | tee "$OUT/gpus.txt"
gpus=$(grep -c . "$OUT/gpus.txt" || true)
(nvidia-smi topo -m 2>/dev/null | head -4) > "$OUT/topology.txt" || true
gpus=${gpus:-0}
if [ "$gpus" -lt 2 ]; then
  echo "gpu_tp.sh: $gpus GPU(s) visible; tensor parallelism needs 2 (run on nvidia-h100-x2)" >&2
  exit 1
fi
failed=0
# The TP sizes: --tp, else 1,2 (and 4 where 4 GPUs are visible); none above the GPU count.
[ -n "$TPS" ] || { TPS=1,2; [ "$gpus" -ge 4 ] && TPS=1,2,4; }
tps=()
for tp in ${TPS//,/ }; do
  if [ "$tp" -gt "$gpus" ]; then echo "(TP=$tp dropped: $gpus GPUs visible)"; continue; fi
  tps+=("$tp")
done
[ "$VARIANT_TP" -le "$gpus" ] || { echo "gpu_tp.sh: --variant-tp $VARIANT_TP: $gpus GPUs visible" >&2; exit 1; }
read -ra MPIV <<<"$(mpi "$VARIANT_TP")"
# The group sizes the tests run over: 2, and 4 when TP=4 runs.
test_sizes=(2)
case " ${tps[*]} " in *" 4 "*) test_sizes+=(4) ;; esac

if want tests; then
  for np in "${test_sizes[@]}"; do
  read -ra MPIT <<<"$(mpi "$np")"
  for t in nccl_communicator_test cuda_tensor_parallel_test nccl_point_to_point_test cuda_pipeline_test; do
    [ -x "$B/$t" ] || { echo "($t not carried: skipped)"; continue; }
    # The point-to-point and pipeline tests are written for two ranks.
    [ "$np" != 2 ] && case $t in nccl_point_to_point_test|cuda_pipeline_test) continue ;; esac
    stamp "== mpirun -np $np $t"
    # nccl_communicator_test with NCCL's INIT and TUNING logs: which kernels the collectives on
    # symmetric windows ran ("[Symmetric]" lines) and why symmetric memory is refused, if it is.
    envs=()
    xs=()
    if [ $t = nccl_communicator_test ]; then
      envs=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING)
      xs=(-x NCCL_DEBUG_SUBSYS)
    fi
    log=$OUT/$t.np$np.log
    if ! env "${envs[@]}" timeout 420 "${MPIT[@]}" "${xs[@]}" "$B/$t" --gtest_color=no \
        ${TEST_FILTER:+--gtest_filter="$TEST_FILTER"} >"$log" 2>&1; then
      failed=1
      echo "FAILED (log: $log)"
    fi
    grep -E '^\[ measured \]|^\[  (PASSED|FAILED|SKIPPED) |Failure|error' "$log" | sort -u | head -60
    if [ $t = nccl_communicator_test ]; then
      echo "NCCL on symmetric memory (from its log):"
      grep -iE 'symmetric|cumem|window' "$log" | sed -E 's/^[^ ]+ [^ ]+ //' | sort | uniq -c |
        sort -rn | head -12
    fi
  done
  done
  # weft generate at each TP size above 2 on GPUs (one rank per GPU) against one GPU's greedy
  # tokens, on every fixture model.
  if [ -x "$B/weft" ]; then
    for tp in "${tps[@]}"; do
      [ "$tp" -gt 2 ] || continue
      read -ra MPIN <<<"$(mpi "$tp")"
      for m in "$ROOT"/tests/fixtures/models/*/; do
        m=${m%/}
        g=(generate --model "$m" --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cuda)
        one=$(timeout 120 "$B/weft" "${g[@]}" 2>"$OUT/generate_tp1.err" | grep -v '^NCCL version')
        many=$(timeout 120 "${MPIN[@]}" "$B/weft" "${g[@]}" --tensor-parallel "$tp" \
          2>"$OUT/generate_tp$tp.err" | grep -v '^NCCL version')
        if [ -n "$one" ] && [ "$one" = "$many" ]; then
          echo "weft generate TP=$tp on GPUs, $(basename "$m"): same 16 tokens as one GPU"
        else
          failed=1
          echo "weft generate TP=$tp on GPUs, $(basename "$m"): FAILED: one GPU [$one], TP=$tp [$many]"
          tail -3 "$OUT/generate_tp$tp.err"
        fi
      done
    done
  fi
  # Hybrid on GPUs (when weft is carried): TP 2 x PP 2 over 4 ranks (two per GPU on 2 GPUs)
  # gives TP=2's greedy tokens, with plain and symmetric buffers. (NCCL prints its version on
  # stdout once per communicator where NCCL_DEBUG asks for it: not part of the tokens.)
  if [ -x "$B/weft" ] && [ "${GPU_TP_HYBRID:-1}" = 1 ]; then
    hy=(generate --model "$ROOT/tests/fixtures/models/llama_gqa_f32" --prompt-ids 5,17,42,99,3,201,64
        --max-tokens 8 --ignore-eos --device cuda)
    for buffers in plain symmetric; do
      stamp "== hybrid on GPUs, WEFT_TP_NCCL_BUFFERS=$buffers: TP=2 against TP 2 x PP 2"
      log=$OUT/hybrid_$buffers.log
      two=$(WEFT_TP_NCCL_BUFFERS=$buffers timeout 120 "${MPI2[@]}" -x WEFT_TP_NCCL_BUFFERS "$B/weft" \
        "${hy[@]}" --tensor-parallel 2 2>"$log" | grep -v '^NCCL version')
      four=$(WEFT_TP_NCCL_BUFFERS=$buffers timeout 120 "${MPI4[@]}" -x WEFT_TP_NCCL_BUFFERS "$B/weft" \
        "${hy[@]}" --tensor-parallel 2 --pipeline-parallel 2 --micro-batches 2 2>>"$log" |
        grep -v '^NCCL version')
      echo "tp2:       $two"
      echo "tp2 x pp2: $four"
      if [ -n "$two" ] && [ "$two" = "$four" ]; then echo "hybrid ($buffers): same tokens"; else
        failed=1; echo "hybrid ($buffers): FAILED (log: $log)"; tail -5 "$log"; fi
    done
  fi
fi

if want forward; then
  for shape in ${SHAPES//,/ }; do
    args=(--shape "$shape" --batches "$BATCHES" --prefill 512 --repeats 20)
    [ "$shape" = 70b ] && args+=(--layers "$LAYERS_70B")
    for tp in "${tps[@]}"; do
      stamp "== cuda_forward_bench ${args[*]} --tensor-parallel $tp"
      if [ $tp = 1 ]; then
        timeout 400 "$B/cuda_forward_bench" "${args[@]}" --json "$OUT/forward_${shape}_tp1.json" \
          >"$OUT/forward_${shape}_tp1.txt" 2>&1 || { failed=1; echo "FAILED"; }
      else
        read -ra MPIN <<<"$(mpi "$tp")"
        timeout 400 "${MPIN[@]}" "$B/cuda_forward_bench" "${args[@]}" --tensor-parallel "$tp" --profile \
          --json "$OUT/forward_${shape}_tp$tp.json" >"$OUT/forward_${shape}_tp$tp.txt" 2>&1 ||
          { failed=1; echo "FAILED"; }
      fi
      grep -E '^(tensor parallel|device|decode|prefill|KV pool)' "$OUT/forward_${shape}_tp$tp.txt" | head -12
    done
  done
fi

if want variants; then
  # TP=1 once, then TP=2 with the default environment and with each variant (NAME=VALUE words
  # exported for mpirun -x).
  vargs=(--shape "$VARIANT_SHAPE" --batches "$VARIANT_BATCHES" --prefill 512 --repeats 20)
  [ "$VARIANT_SHAPE" = 70b ] && vargs+=(--layers "$LAYERS_70B")
  stamp "== variants: cuda_forward_bench ${vargs[*]} --tensor-parallel 1"
  timeout 300 "$B/cuda_forward_bench" "${vargs[@]}" --json "$OUT/variant_tp1.json" \
    >"$OUT/variant_tp1.txt" 2>&1 || { failed=1; echo "FAILED (see $OUT/variant_tp1.txt)"; }
  grep -E '^decode' "$OUT/variant_tp1.txt" | head -4
  # The table so far (written after every run, so a run cut short by a time limit still
  # leaves the rows before it in $OUT/gpu_tp_variants.md).
  variants_table() {
  python3 - "$OUT" "$VARIANT_TP" "$VARIANT_SHAPE" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
tp = sys.argv[2]
shape = sys.argv[3]
def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
def decode(doc):
    return {r["batch"]: r for r in (doc or {}).get("rows", []) if r["kind"] == "decode"}
one = decode(load(os.path.join(out, "variant_tp1.json")))
batches = sorted(one)
print(f"TP={tp} variants, {shape} shape, decode (context 512): ms/step, speedup over TP=1, and device ms"
      " per step in all-reduces + the head's all-gather (plain launches with events)\n")
head = "| variant | " + " | ".join(f"batch {b}: ms (x TP=1), collectives ms" for b in batches) + " |"
print(head)
print("| --- |" + " ---: |" * len(batches))
print("| TP=1 (1 GPU) | " + " | ".join(f"{one[b]['ms']:.3f}" for b in batches) + " |")
k = 0
buffers = []
while os.path.exists(os.path.join(out, f"variant_{k}.name")):
    name = open(os.path.join(out, f"variant_{k}.name")).read().strip()
    doc = load(os.path.join(out, f"variant_{k}.json"))
    rows = decode(doc)
    buffers.append(f"- {name}: {(doc or {}).get('tensor_parallel_buffers', '(not recorded)')}; "
                   f"fused norm: {(doc or {}).get('tensor_parallel_fused_norm', '(not recorded)')}")
    cells = []
    for b in batches:
        r = rows.get(b)
        if r is None:
            cells.append("failed")
            continue
        prof = r.get("profile_ms_per_step", {})
        coll = (prof.get("all-reduce", 0) + prof.get("lm_head all-gather", 0) +
                prof.get("fused all-reduce + norm", 0))
        cells.append(f"{r['ms']:.3f} ({one[b]['ms'] / r['ms']:.2f}x), {coll:.3f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
    k += 1
if buffers:
    print("\nWhere each variant's collectives ran (WEFT_TP_NCCL_BUFFERS; a refused request says why),"
          " and whether the fused all-reduce + norm ran (WEFT_TP_FUSED_NORM; if not, why):\n")
    print("\n".join(buffers))
PY
  }
  k=0
  for v in "" "${VARIANTS[@]}"; do
    envs=()
    xs=()
    for kv in $v; do
      envs+=("$kv")
      xs+=(-x "${kv%%=*}")
    done
    echo "${v:-default}" >"$OUT/variant_$k.name"
    stamp "== variant $k (${v:-default}): TP=$VARIANT_TP"
    env "${envs[@]}" timeout 300 "${MPIV[@]}" "${xs[@]}" "$B/cuda_forward_bench" "${vargs[@]}" \
      --tensor-parallel "$VARIANT_TP" --profile --json "$OUT/variant_$k.json" >"$OUT/variant_$k.txt" 2>&1 ||
      { failed=1; echo "FAILED (see $OUT/variant_$k.txt)"; }
    grep -E '^decode|profile, batch' "$OUT/variant_$k.txt" | head -6
    k=$((k + 1))
    variants_table >"$OUT/gpu_tp_variants.md"
  done
  variants_table | tee "$OUT/gpu_tp_variants.md"
fi

if want weft; then
  if [ ! -f "$TOKENIZER/tokenizer.json" ] && [ -f "$TOKENIZER/tokenizer.json.gz" ]; then
    gunzip -k "$TOKENIZER/tokenizer.json.gz"
  fi
  for shape in ${SHAPES//,/ }; do
    M=/tmp/weft-tp-$shape
    make_args=(--shape "$shape")
    if [ "$shape" = 70b ]; then
      M=/tmp/weft-tp-70b-${LAYERS_70B}layers
      make_args+=(--layers "$LAYERS_70B")
    fi
    if [ ! -f "$M/config.json" ]; then
      stamp "== making $M"
      python3 bench/make_random_model.py "${make_args[@]}" --tokenizer "$TOKENIZER" --out "$M" 2>&1 | tail -1
      [ -f "$M/config.json" ] || { failed=1; echo "FAILED: no model in $M"; continue; }
    fi
    for tp in "${tps[@]}"; do
      for load in b1 b64; do
        if [ $load = b1 ]; then
          work=(--num-requests 8 --max-concurrency 1 --input-len 128 --output-len 128)
        else
          work=(--num-requests 256 --max-concurrency 64 --input-len 512 --output-len 128)
        fi
        common=(bench --model "$M" --device cuda --gpu-memory-fraction 0.85 --seed 1 "${work[@]}")
        log=$OUT/weft_${shape}_tp${tp}_$load
        stamp "== weft ${common[*]} (TP=$tp)"
        if [ $tp = 1 ]; then
          timeout 300 "$B/weft" "${common[@]}" >"$log.txt" 2>"$log.err" || { failed=1; echo "FAILED (see $log.err)"; }
        else
          read -ra MPIN <<<"$(mpi "$tp")"
          timeout 300 "${MPIN[@]}" "$B/weft" "${common[@]}" --tensor-parallel "$tp" >"$log.txt" 2>"$log.err" ||
            { failed=1; echo "FAILED (see $log.err)"; }
        fi
        grep -E '^requests|^TTFT' "$log.txt" | head -2
        tail -1 "$log.txt" > "$log.json"
      done
    done
  done
fi

# The table: TP=1 against every other TP size, for every row both runs have; the speedup and
# the scaling efficiency (speedup / TP size).
python3 - "$OUT" <<'PY' | tee "$OUT/gpu_tp_table.md"
import glob, json, os, re, sys
out = sys.argv[1]
def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
gpus = open(os.path.join(out, "gpus.txt")).read().strip().splitlines()
print(f"GPUs: {'; '.join(gpus)}\n")
rows = []
sizes = set()
for one in sorted(glob.glob(os.path.join(out, "forward_*_tp1.json"))):
    a = load(one)
    if not a:
        continue
    shape = os.path.basename(one)[len("forward_"):-len("_tp1.json")]
    others = {}
    for path in glob.glob(os.path.join(out, f"forward_{shape}_tp*.json")):
        n = int(re.search(r"_tp(\d+)\.json$", path).group(1))
        if n > 1 and load(path):
            others[n] = load(path)
    for ra in a["rows"]:
        cells = {}
        for n, b in others.items():
            match = [rb for rb in b["rows"] if rb["kind"] == ra["kind"] and
                     rb.get("batch") == ra.get("batch") and rb.get("tokens") == ra.get("tokens")]
            if not match:
                continue
            rb = match[0]
            if ra["kind"] == "decode":
                # Device ms per step in the collectives (--profile's plain launches with events).
                prof = rb.get("profile_ms_per_step", {})
                coll = (prof.get("all-reduce", 0) + prof.get("lm_head all-gather", 0) +
                        prof.get("fused all-reduce + norm", 0))
                text = f"{rb['ms']:.3f} ms, {rb['tokens_per_s']:.0f} tok/s" + (
                    f" ({coll:.3f} ms in collectives)" if prof else "")
            else:
                text = f"{rb['ms']:.2f} ms"
            cells[n] = (text, ra["ms"] / rb["ms"])
            sizes.add(n)
        if not cells:
            continue
        if ra["kind"] == "decode":
            what = f"forward decode, batch {ra['batch']} (context {ra['context']})"
            base = f"{ra['ms']:.3f} ms, {ra['tokens_per_s']:.0f} tok/s"
        else:
            what = f"forward prefill, {ra['tokens']} tokens"
            base = f"{ra['ms']:.2f} ms"
        rows.append((a["model"], what, base, cells))
for one in sorted(glob.glob(os.path.join(out, "weft_*_tp1_*.json"))):
    a = load(one)
    if not a:
        continue
    name = os.path.basename(one)[len("weft_"):-len(".json")]
    shape, load_kind = name.split("_tp1_")
    cells = {}
    for path in glob.glob(os.path.join(out, f"weft_{shape}_tp*_{load_kind}.json")):
        n = int(re.search(r"_tp(\d+)_", path).group(1))
        b = load(path)
        if n > 1 and b:
            cells[n] = (f"{b['output_tokens_per_s']:.1f} tok/s, {b.get('tpot_ms_p50', 0):.2f} ms",
                        b["output_tokens_per_s"] / a["output_tokens_per_s"])
            sizes.add(n)
    what = ("weft bench, batch 1 (8 requests in turn, 128 in / 128 out): output tok/s, TPOT p50"
            if load_kind == "b1" else
            "weft bench, batch 64 (256 requests, 512 in / 128 out): output tok/s, TPOT p50")
    if cells:
        rows.append((shape, what,
                     f"{a['output_tokens_per_s']:.1f} tok/s, {a.get('tpot_ms_p50', 0):.2f} ms", cells))
sizes = sorted(sizes)
head = "| model | measure | TP=1 (1 GPU) | " + " | ".join(
    f"TP={n} ({n} GPUs) | TP={n} speedup (efficiency)" for n in sizes) + " |"
print(head)
print("| --- | --- | ---: |" + " ---: | ---: |" * len(sizes))
for model, what, base, cells in rows:
    rest = []
    for n in sizes:
        if n in cells:
            text, speedup = cells[n]
            rest += [text, f"{speedup:.2f}x ({100 * speedup / n:.0f}%)"]
        else:
            rest += ["", ""]
    print(f"| {model} | {what} | {base} | " + " | ".join(rest) + " |")
if not rows:
    print("| (no TP=1 run and larger run of the same shape finished) | | |")
PY
stamp "done"
[ "$failed" = 0 ] && echo "gpu_tp.sh: all runs finished" || echo "gpu_tp.sh: FAILURES (logs in $OUT)"
exit "$failed"
