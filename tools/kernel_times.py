"""GPU time of the kernels alone (torch.profiler's CUDA activity), ours against torch, where bench.py's per-call
times mix kernel time with launch cost: the sizes where both are about as long (2^20 ... 2^23 on the H100).

    python tools/kernel_times.py [--sizes 2^21,2^22,2^23] [--calls 200]
"""

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import OPS, parse_sizes  # noqa: E402  (the ops as bench.py times them; imports activations)


def kernel_us(fn, x, calls):
    """Mean GPU time per call of the kernels fn launches (us), and their names."""
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = sorted({e.name[:60] for e in kernels})
    return sum(e.device_time for e in kernels) / calls, names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("2^20,2^21,2^22,2^23,2^24"))
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: mean kernel time per forward call (us)")
    with torch.no_grad():
        for name, (ours, theirs) in OPS.items():
            for dtype in (torch.float32, torch.bfloat16):
                for n in args.sizes:
                    x = torch.randn(n, device="cuda", dtype=dtype)
                    ours_us, ours_names = kernel_us(ours, x, args.calls)
                    torch_us, torch_names = kernel_us(theirs, x, args.calls)
                    print(f"{name:4s} {str(dtype)[6:]:8s} 2^{n.bit_length() - 1:<2d} ours {ours_us:7.2f} "
                          f"torch {torch_us:7.2f}  torch/ours {torch_us / ours_us:4.2f}  {ours_names} {torch_names}")


if __name__ == "__main__":
    main()
