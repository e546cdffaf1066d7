"""Softmax and log_softmax on the CPU over short rows (2^21 elements in rows of 8 ... 1000), ours against torch's,
forward and backward, float32 and bfloat16 (ROWS: the row lengths, e.g. ROWS="4 8 32"): the samples taken in turn (bench.best_of_rounds), ratio torch/ours
(above 1: ours is faster).

    python tools/cpu_softmax_short_rows.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402
import bench  # noqa: E402


def main():
    cpu = torch.device("cpu")
    bench.warm_torch_cpu_math()
    for n in [int(n) for n in os.environ.get("ROWS", "4 8 12 16 32 64 128 256 1000").split()]:
        for dtype in [torch.float32, torch.bfloat16]:
            x = torch.randn(2**21 // n, n, dtype=dtype)
            g = torch.randn_like(x)
            for name in ["softmax", "log_softmax"]:
                y = getattr(torch, name)(x, -1)
                ours_backward = getattr(torch.ops.activations, name + "_backward").default
                torch_backward = getattr(torch.ops.aten, f"_{name}_backward_data").default
                forward = bench.best_of_rounds({"ours": lambda: getattr(activations, name)(x, -1),
                                                "torch": lambda: getattr(torch, name)(x, -1)}, cpu, 10, 2)
                backward = bench.best_of_rounds({"ours": lambda: ours_backward(g, y, -1),
                                                 "torch": lambda: torch_backward(g, y, -1, dtype)}, cpu, 10, 2)
                print(f"{x.shape[0]}x{n} {str(dtype)[6:]:9s} {name:12s} forward {forward['torch'] / forward['ours']:.2f}x "
                      f"({forward['ours']:.3f} ms)  backward {backward['torch'] / backward['ours']:.2f}x "
                      f"({backward['ours']:.3f} ms)", flush=True)


if __name__ == "__main__":
    main()
