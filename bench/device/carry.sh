# Sourced by the device scripts, from the checkout's root: `. bench/device/carry.sh NAME`
# unpacks the carried .devcarry/NAME/gpu.tar.xz (bin/ and lib/, made by /work/wt/pack_gpu.sh or
# the same by hand) into /tmp/NAME and sets d (that folder), B ($d/bin), O ($OUT or /tmp/out,
# created), LD_LIBRARY_PATH (its lib/ and CUDA's), WEFT_SPEC_DIR and WEFT_TEST_SOURCE_DIR (this
# checkout), NCCL_NVLS_ENABLE=0 (no NVLink multicast on shared GPUs) and Open MPI's run-as-root
# switches, then names the GPUs. A carry that does not unpack ends the script.
carry_name=${1:?usage: . bench/device/carry.sh NAME (the folder under .devcarry)}
O=${OUT:-/tmp/out}
mkdir -p "$O"
d=/tmp/$carry_name
mkdir -p "$d" && tar -C "$d" -xJf ".devcarry/$carry_name/gpu.tar.xz" ||
  { echo "carry.sh: cannot unpack .devcarry/$carry_name/gpu.tar.xz (carried?)" >&2; exit 2; }
B=$d/bin
export LD_LIBRARY_PATH=$d/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models WEFT_TEST_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
