"""The float32 error bounds over every float32 input: each op case's forward and backward against the float64
references of test_activations.py, in ulps as the tests count them (ulp_errors). The backward takes a random
incoming gradient, as the tests do, or (--worst-gradient) the one that makes its product with f'(x) have a mantissa
of 1.99: that product can double an error of f' counted in ulps (an f' 1.75 ulp off with a mantissa near 1 is
3.5 ulp off once the product's mantissa is near 2), so a gradient of 1 understates the bound.
test_float32_whole_range samples every 1024th bit pattern; this walks all 2^32 (or every STRIDE-th with --stride)
on one device, in chunks, and prints the largest error per case with the input where it occurs. The expected
results and their floors are the tests' (expected_results); the references are evaluated on the same device in
float64 (the mpmath refinement of gelu's far tail that the float64 tests use is not needed for float32 results).

    python tools/ulp_sweep.py [--device cuda] [--stride 1] [--cases mish,silu] [--worst-gradient]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_activations as t  # noqa: E402  (the references, the cases, the bounds and the ulp measure)


def case_errors(name, x, seed, worst_gradient=False):
    """(forward ulps, backward ulps) of case `name` at float32 inputs x; 0 where the result is NaN, infinite or an
    exact zero (test_float32_whole_range checks those for equality). The backward takes a standard normal incoming
    gradient drawn from `seed`, or with worst_gradient the one that puts the exact product's mantissa at 1.99:
    an error of f' relative to f' counts most in ulps of the product there."""
    case = t.CASES[name]
    terms = t.reference_terms(case, x)
    if worst_gradient:
        derivative = terms[1].abs()
        grad = torch.where(derivative > 0, 1.99 / derivative, 1.0).float()
    else:
        grad = torch.randn(x.shape, generator=torch.Generator(x.device).manual_seed(seed), device=x.device)
    x_ = x.clone().requires_grad_()
    y = t.ours(name)(x_)
    (g,) = torch.autograd.grad(y, x_, grad)
    y = y.detach()
    exact_y, floor_y, exact_g, floor_g = t.expected_results(case.op, terms, y, grad.double(), torch.float32)
    errors = []
    for actual, exact, floor in ((y, exact_y, floor_y), (g, exact_g, floor_g)):
        rounded = exact.float()
        measured = exact.isfinite() & (exact != 0) & rounded.isfinite() & actual.isfinite()
        e = t.ulp_errors(actual, exact, floor)
        errors.append(torch.where(measured, e, torch.zeros_like(e)))
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--stride", type=int, default=1, help="every STRIDE-th bit pattern (default: all)")
    parser.add_argument("--cases", default=",".join(t.CASES), help="comma-separated case names of test_activations")
    parser.add_argument("--chunk", type=int, default=1 << 24, help="inputs per chunk")
    parser.add_argument("--worst-gradient", action="store_true",
                        help="the backward at the gradient that makes f's error count most (default: random)")
    args = parser.parse_args()
    names = args.cases.split(",")
    unknown = [name for name in names if name not in t.CASES]
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; choose from {', '.join(t.CASES)}")
    if args.stride < 1 or args.chunk < 1:
        parser.error("--stride and --chunk must be at least 1")
    step = args.chunk * args.stride
    gradients = "the worst gradient (product mantissa 1.99)" if args.worst_gradient else "random gradients"
    print(f"float32 ulp error over every {args.stride}th float32 input ({args.device}), backward at {gradients}; "
          "bound from FLOAT32_ULP")
    for name in names:
        worst = [(0.0, None), (0.0, None)]
        for start in range(0, 1 << 32, step):
            patterns = torch.arange(start, min(start + step, 1 << 32), args.stride, dtype=torch.int64,
                                    device=args.device)
            x = (patterns - (1 << 31)).to(torch.int32).view(torch.float32)  # signed: negative floats first
            for direction, e in enumerate(case_errors(name, x, seed=start, worst_gradient=args.worst_gradient)):
                top = e.max().item()
                if top > worst[direction][0]:
                    worst[direction] = (top, x[e.argmax()].item())
        bound = t.FLOAT32_ULP[t.CASES[name].op]
        line = f"{name:28s}"
        for direction, label in enumerate(("forward", "backward")):
            error, at = worst[direction]
            flag = "  OVER" if error > bound[direction] else ""
            line += f"  {label} {error:6.3f} (bound {bound[direction]}) at {at!r:>16}{flag}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
