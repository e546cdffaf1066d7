"""Times bench.py's CPU cells in cache, one thread: ours against torch's, samples taken in turn as bench.py takes
them (bench.interleaved_ms), for loops whose cost the 2^22-element table hides behind memory.

    python tools/cpu_in_cache.py gelu:float32:forward,silu:bfloat16:backward [numel, default 2^18]

REPS (environment) sets the samples of each side (default 60). Prints ns an element, ours then torch, and
torch/ours.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench  # noqa: E402


def main():
    torch.set_num_threads(1)
    bench.warm_torch_cpu_math()
    numel = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 18
    rows = {row.name: row for row in bench.table_rows()}
    for cell in sys.argv[1].split(","):
        op, dtype, direction = cell.split(":")
        row = rows[op]
        x = torch.randn(numel, dtype=getattr(torch, dtype))
        g = torch.rand_like(x) * 2 - 1
        runs = {side: bench.make_pass(getattr(row, side), x, g, direction) for side in ("torch", "ours")}
        ms = bench.interleaved_ms(runs, torch.device("cpu"), int(os.environ.get("REPS", 60)))
        ours, theirs = (ms[side] * 1e6 / numel for side in ("ours", "torch"))
        print(f"{cell} ours {ours:.3f} torch {theirs:.3f} ns/el {theirs / ours:.2f}x", flush=True)


if __name__ == "__main__":
    main()
