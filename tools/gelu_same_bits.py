"""Whether the float32 GELU (erf form) gives the same bits on the CPU and on the GPU: both compute
float_math::normal_tail (kernels/activations.cuh), every step an explicit fma or a single IEEE operation. Walks every
float32 bit pattern (or every STRIDE-th) in chunks, computes the forward and the backward (at an incoming gradient
of 1) on both devices, and counts the results whose bits differ (NaNs compared as NaNs, their payloads aside). Where
the CPU has AVX-512 its forward takes a table for x >= -4.75 (kernels/gelu_table_cpu.cpp): the forward is compared
below -4.75 only there.

    python tools/gelu_same_bits.py [--stride 1] [--chunk 2^26]  (inputs per chunk)
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def results(x):
    """(forward, backward at gradient 1) of GELU at x, on x's device."""
    y = activations.gelu(x)
    grad = torch.ops.activations.backward(torch.ones_like(x), x, "gelu", [0.0], "input")
    return y, grad


def differing(a, b):
    """Where a and b (float32, same shape) differ in bits, NaN equal to NaN."""
    return (a.view(torch.int32) != b.view(torch.int32)) & ~(a.isnan() & b.isnan())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--chunk", type=lambda s: 2 ** int(s[2:]) if s.startswith("2^") else int(s), default=1 << 26)
    options = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gelu_same_bits: needs a CUDA GPU")
    table_on_cpu = "-DACTIVATIONS_CPU_AVX512" in activations.cpu_flags()
    total = forward_diff = backward_diff = 0
    first = None
    for start in range(0, 1 << 32, options.chunk * options.stride):
        bits = torch.arange(start, min(start + options.chunk * options.stride, 1 << 32), options.stride,
                            dtype=torch.int64)
        x = (bits - (1 << 32) * (bits >= 1 << 31)).to(torch.int32).view(torch.float32)  # the patterns as int32
        cpu_y, cpu_g = results(x)
        gpu_y, gpu_g = (t.cpu() for t in results(x.cuda()))
        forward_bad, backward_bad = differing(cpu_y, gpu_y), differing(cpu_g, gpu_g)
        if table_on_cpu:
            forward_bad &= x < -4.75
        f, b = int(forward_bad.sum()), int(backward_bad.sum())
        if (f or b) and first is None:
            i = int((forward_bad | backward_bad).nonzero()[0])
            first = (x[i].item(), cpu_y[i].item(), gpu_y[i].item(), cpu_g[i].item(), gpu_g[i].item())
        forward_diff, backward_diff, total = forward_diff + f, backward_diff + b, total + x.numel()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: {total} float32 inputs (stride {options.stride})")
    print(f"forward{' (x < -4.75: the CPU takes its table above)' if table_on_cpu else ''}: {forward_diff} differ; "
          f"backward (gradient 1): {backward_diff} differ")
    if first is not None:
        print("first difference: x = %r: forward cpu %r gpu %r, backward cpu %r gpu %r" % first)


if __name__ == "__main__":
    main()
