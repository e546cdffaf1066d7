"""Times our softmax / log_softmax (forward or backward operator) at one shape under each CUDA path named, beside
torch's. A path is a value of ACTIVATIONS_SOFTMAX_PLAN (kernels/softmax_kernels.cuh, plan_rows): "default" (the
choice the code makes), "split" (the two passes as two kernels), "steps" (in one cooperative grid, steps of rows
at a time), "staged,C" (C blocks a row) or "threads,elements"; over another dim than the
last (the shape followed by ":dim"), "columns", "columns,1", "columns,16" (one column or 16 bytes of columns a thread;
column_vector), "columns,split" (a block's threads sharing a column's rows; split_column_width) or "tiles,W" (W
columns a tile; plan_columns). A path that does not fit the shape falls back to the default choice.

    python tools/softmax_plans.py 4096,393216 float32 softmax forward default split staged,8 staged,16
    python tools/softmax_plans.py 1024,1024,1024:1 bfloat16 softmax backward default columns tiles,16 tiles,32
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def time_ms(fn, reps=15):
    for _ in range(3):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", help="e.g. 4096,393216 (the last dim), or 1024,1024,1024:1 (over dim 1)")
    parser.add_argument("dtype", choices=["float32", "bfloat16", "float16", "float64"])
    parser.add_argument("op", choices=list(activations.REDUCTIONS))
    parser.add_argument("direction", choices=["forward", "backward"])
    parser.add_argument("plans", nargs="*", default=["default"], help="values of ACTIVATIONS_SOFTMAX_PLAN")
    args = parser.parse_args()
    shape_text, _, dim_text = args.shape.partition(":")
    try:
        args.dims = tuple(int(v) for v in shape_text.split(",")), int(dim_text or -1)
    except ValueError:
        parser.error(f"shape {args.shape!r}: sizes separated by commas, then ':dim' if not the last")
    if not torch.cuda.is_available():
        parser.error("the plans are CUDA paths: this needs a CUDA GPU")
    return args


def main():
    args = arguments()
    (shape, dim), plans = args.dims, args.plans
    dtype, name, direction = getattr(torch, args.dtype), args.op, args.direction
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = activations.REDUCTIONS[name].torch_function(x, dim)
    g = torch.randn_like(x)
    if direction == "forward":
        ours = lambda: getattr(activations, name)(x, dim)  # noqa: E731
        theirs = lambda: activations.REDUCTIONS[name].torch_function(x, dim)  # noqa: E731
    else:
        aten = getattr(torch.ops.aten, f"_{name}_backward_data").default
        ours = lambda: getattr(torch.ops.activations, name + "_backward").default(g, y, dim)  # noqa: E731
        theirs = lambda: aten(g, y, dim, dtype)  # noqa: E731
    expected = theirs()
    torch_ms = time_ms(theirs)
    for plan in plans:
        os.environ.pop("ACTIVATIONS_SOFTMAX_PLAN", None)
        if plan != "default":
            os.environ["ACTIVATIONS_SOFTMAX_PLAN"] = plan
        # Tolerances relative to the result's scale: softmax's values are about 1 / n, so a fixed atol would pass
        # anything. At least one rounding step of the dtype at that scale: two correct 16-bit results may differ by
        # one (bfloat16's eps is 2^-7, and 1e-3 of the scale failed a backward by one ulp, at 23 of 2^28 elements).
        scale = expected.abs().max().item()
        torch.testing.assert_close(ours(), expected, atol=max(1e-3, torch.finfo(dtype).eps) * scale, rtol=2e-2)
        ours_ms = time_ms(ours)
        print(f"{name} {direction} {args.shape} {args.dtype} plan {plan:<12} ours {ours_ms:7.3f} ms  "
              f"torch {torch_ms:7.3f} ms  {torch_ms / ours_ms:5.2f}x", flush=True)
    os.environ.pop("ACTIVATIONS_SOFTMAX_PLAN", None)


if __name__ == "__main__":
    main()
