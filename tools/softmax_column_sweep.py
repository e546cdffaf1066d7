"""Softmax and log_softmax over dim 1 of [outer, n, inner] shapes on CUDA, forward and backward, float32 and
bfloat16: torch's time, then ours under the default plan and each forced plan (ACTIVATIONS_SOFTMAX_PLAN, see
tools/softmax_plans.py; a plan that does not fit falls back to the default), ms as CUDA-event medians (best of 2),
with % of the floor at 3.0 TB/s (read once and written once; the backward reads two).

    python tools/softmax_column_sweep.py                          # n = 2-256 over inner 1024, 256 and 32
    SHAPES="16x16384x1024 8x300x131072" PLANS="columns,1 columns,16 tiles,32" python tools/softmax_column_sweep.py
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations  # noqa: E402,F401  (registers torch.ops.activations)
from softmax_plans import time_ms  # noqa: E402

FLOOR_BYTES_PER_S = 3.0e12


def default_shapes(total=1 << 28):
    shapes = [(total // (n * 1024), n, 1024) for n in (2, 4, 8, 16, 32, 64, 128, 256)]
    shapes += [(total // (n * 256), n, 256) for n in (8, 32, 128)]
    return shapes + [(total // (n * 32), n, 32) for n in (8, 32, 128)]


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if not torch.cuda.is_available():
        sys.exit("softmax_column_sweep.py times CUDA paths: it needs a CUDA GPU")
    text = os.environ.get("SHAPES")
    shapes = [tuple(int(v) for v in s.split("x")) for s in text.split()] if text else default_shapes()
    plans = os.environ.get("PLANS", "columns,1 columns,16 tiles,64 tiles,128 tiles,256").split()
    dtypes = [getattr(torch, d) for d in os.environ.get("DTYPES", "float32 bfloat16").split()]
    ops = torch.ops.activations
    for shape in shapes:
        for dtype in dtypes:
            x = torch.randn(shape, device="cuda", dtype=dtype)
            g = torch.randn_like(x)
            for name in ("softmax", "log_softmax"):
                y = getattr(torch, name)(x, 1)
                aten = torch._softmax_backward_data if name == "softmax" else torch._log_softmax_backward_data
                for direction, ours, theirs, tensors in [
                        ("forward", lambda: getattr(ops, name)(x, 1), lambda: getattr(torch, name)(x, 1), 2),
                        ("backward", lambda: getattr(ops, name + "_backward")(g, y, 1),
                         lambda: aten(g, y, 1, dtype), 3)]:
                    expected = theirs()
                    torch_ms = min(time_ms(theirs) for _ in range(2))
                    cells = []
                    for plan in ["default"] + plans:
                        os.environ.pop("ACTIVATIONS_SOFTMAX_PLAN", None)
                        if plan != "default":
                            os.environ["ACTIVATIONS_SOFTMAX_PLAN"] = plan
                        # A sanity check of the plan's result, not a test (test_activations.py holds those):
                        # tolerances relative to the result's scale, a bfloat16 ulp or so.
                        tolerance = 1e-3 if dtype == torch.float32 else 8e-3
                        torch.testing.assert_close(ours(), expected, rtol=2e-2,
                                                   atol=tolerance * expected.abs().max().item())
                        ours_ms = min(time_ms(ours) for _ in range(2))
                        floor = 100 * tensors * x.numel() * x.element_size() / (ours_ms * 1e-3) / FLOOR_BYTES_PER_S
                        cells.append(f"{plan} {ours_ms:.3f} ({floor:.0f}%)")
                    os.environ.pop("ACTIVATIONS_SOFTMAX_PLAN", None)
                    print(f"{'x'.join(map(str, shape))}:1 {str(dtype)[6:]:8s} {name:11s} {direction:8s} "
                          f"torch {torch_ms:.3f} | " + " | ".join(cells), flush=True)
            del x, g, y
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
