"""The largest and mean errors, in ulp of the float64 result, of float32 softmax over the last dim: ours, torch's
and, where Liger-Kernel is importable, its Triton softmax. Rows of randn x SCALE; an ulp of a result below 2^-126 is
2^-149 (a subnormal's spacing).

    python tools/softmax_accuracy.py            # on the GPU; 4096 x 1024 and 512 x 32768, scales 1 and 8
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def ulp_of(exact):
    """The float32 spacing at each float64 value: 2^(e - 23) for a normal float's exponent e, else 2^-149."""
    magnitude = exact.abs()
    normal = magnitude >= 2.0**-126
    exponent = torch.floor(torch.log2(magnitude.clamp_min(2.0**-126)))
    return torch.where(normal, 2.0 ** (exponent - 23), torch.full_like(exact, 2.0**-149))


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    contenders = {"ours": lambda x: activations.softmax(x, -1), "torch": lambda x: torch.softmax(x, -1)}
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction

        if device == "cuda":
            contenders["liger"] = LigerSoftmaxFunction.apply
    except ImportError:
        print("Liger-Kernel not importable: ours and torch's only")
    torch.manual_seed(0)
    for rows, n, scale in [(4096, 1024, 1.0), (4096, 1024, 8.0), (512, 32768, 1.0), (512, 32768, 8.0)]:
        x = torch.randn(rows, n, device=device) * scale
        exact = torch.softmax(x.double(), -1)
        ulp = ulp_of(exact)
        for name, softmax in contenders.items():
            error = (softmax(x).double() - exact).abs() / ulp
            print(f"{rows}x{n} x~N(0,{scale}^2) {name:6s} max {error.max().item():8.1f} ulp, "
                  f"mean {error.mean().item():.3f}", flush=True)


if __name__ == "__main__":
    main()
