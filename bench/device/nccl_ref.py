"""NCCL all-reduce through PyTorch (its own NCCL build), the reference for Weft's collectives:
the time of one all-reduce of each size in fp32 and bf16, median of ITERS after a warm-up,
each timed alone with CUDA events after a barrier (as a layer's all-reduce runs: alone on the
stream), and ten back to back (the rate without the wait for the peer). Launch: torchrun --nproc_per_node=N bench/device/nccl_ref.py
(NCCL_NVLS_ENABLE=0 on shared machines). Rank 0 prints a table: size, dtype, us, algbw GB/s."""
import os
import statistics

import torch
import torch.distributed as dist

ITERS = int(os.environ.get("ITERS", "40"))


def main():
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"{n} ranks, {torch.cuda.get_device_name()}")
        print("| MB | dtype | us (median, alone) | algbw GB/s | busbw GB/s | us each, 10 back to back |")
        print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for mb in (0.03125, 0.5, 1, 2, 4, 8, 16, 64):
        for dtype in (torch.float32, torch.bfloat16):
            elems = int(mb * 2**20) // (4 if dtype == torch.float32 else 2)
            x = torch.ones(elems, dtype=dtype, device="cuda")
            times = []
            for i in range(ITERS + 5):
                dist.barrier()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                dist.all_reduce(x)
                b.record()
                b.synchronize()
                if i >= 5:
                    times.append(a.elapsed_time(b) * 1000)
            us = statistics.median(times)
            bursts = []
            for i in range(8):
                dist.barrier()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    dist.all_reduce(x)
                b.record()
                b.synchronize()
                if i >= 2:
                    bursts.append(a.elapsed_time(b) * 100)
            nbytes = elems * x.element_size()
            if rank == 0:
                alg = nbytes / us / 1e3
                print(f"| {mb:g} | {str(dtype).split('.')[-1]} | {us:.1f} | {alg:.0f} | {alg * 2 * (n - 1) / n:.0f} | {statistics.median(bursts):.1f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
