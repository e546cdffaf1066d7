"""Softmax and log_softmax on the CPU at the shapes given, ours against torch's, forward (NAME softmax or
log_softmax) or backward (NAME_backward: the backward operators, ours and aten's _NAME_backward_data): the least
time of many calls, the two taken in turn (on a machine whose speed moves from second to second, the least
disturbed call is steadier than a median). THREADS (default 2) and REPS (calls of each, default 200) from the
environment.

    python tools/cpu_softmax_min.py 4096x1024:float16:softmax,64x50257:float16:log_softmax_backward
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def main():
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    reps = int(os.environ.get("REPS", "200"))
    for spec in sys.argv[1].split(","):
        shape_text, dtype_name, name = spec.split(":")
        dtype = getattr(torch, dtype_name)
        x = torch.randn(tuple(int(v) for v in shape_text.split("x")), dtype=dtype)
        if name.endswith("_backward"):
            forward = name.removesuffix("_backward")
            y, g = getattr(torch, forward)(x, -1), torch.randn_like(x)
            ours_backward = getattr(torch.ops.activations, name).default
            torch_backward = getattr(torch.ops.aten, f"_{forward}_backward_data").default
            sides = {"ours": lambda: ours_backward(g, y, -1), "torch": lambda: torch_backward(g, y, -1, dtype)}
        else:
            sides = {"ours": lambda: getattr(activations, name)(x, -1), "torch": lambda: getattr(torch, name)(x, -1)}
        best = dict.fromkeys(sides, float("inf"))
        for r in range(reps):
            for side in (("ours", "torch") if r % 2 else ("torch", "ours")):
                start = time.perf_counter_ns()
                sides[side]()
                best[side] = min(best[side], time.perf_counter_ns() - start)
        print(f"{spec}: ours {best['ours'] / 1e3:.1f} us, torch {best['torch'] / 1e3:.1f} us (least of {reps}), "
              f"torch/ours {best['torch'] / best['ours']:.3f}x", flush=True)


if __name__ == "__main__":
    main()
