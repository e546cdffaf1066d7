"""What torch's float32 GELU forward on the CPU is at bench.py's sizes: oneDNN's gelu_erf (ATen's gelu takes oneDNN
for float32 inputs where torch is built with it), faster than torch's own loop and than our generic loop, and far
less accurate in the lower tail; ours takes a table where torch runs AVX-512 (kernels/gelu_table_cpu.cpp). One
thread; the best of many calls (the least disturbed).

    python tools/cpu_gelu_onednn.py

Prints ns an element for torch with and without oneDNN (torch.backends.mkldnn.flags) and for ours, then each one's
largest relative error on x in [-9, -2] against x Phi(x) in float64 (the float32 x itself, so that the input's
rounding does not count), and where torch's passes 1e-3.
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def best_ns_per_element(fn, n, calls):
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def main():
    torch.set_num_threads(1)
    for n in (1 << 16, 1 << 20, 1 << 22):
        x = torch.randn(n)
        calls = 2000 if n <= 1 << 16 else 100
        times = {}
        for _ in range(2):  # the three in turn, twice
            for name, enabled in (("torch, oneDNN", True), ("torch, no oneDNN", False), ("ours", None)):
                with torch.backends.mkldnn.flags(enabled=bool(enabled)):
                    fn = (lambda: activations.gelu(x)) if enabled is None else (lambda: torch.nn.functional.gelu(x))
                    times[name] = min(times.get(name, float("inf")), best_ns_per_element(fn, n, calls))
        print(f"n = {n}: " + ", ".join(f"{name} {ns:.3f}" for name, ns in times.items()) + " ns an element")
    x = torch.linspace(-9, -2, 7001, dtype=torch.float64).float()
    exact = x.double() * 0.5 * torch.special.erfc(-x.double() / 2**0.5)
    big = torch.cat([x] * 16)  # past the size under which torch keeps its own loop
    for name, enabled in (("torch, oneDNN", True), ("torch, no oneDNN", False), ("ours", None)):
        with torch.backends.mkldnn.flags(enabled=bool(enabled)):
            y = (activations.gelu(big) if enabled is None else torch.nn.functional.gelu(big))[: x.numel()].double()
        relative = (y - exact).abs() / exact.abs()
        worst = relative.argmax()
        line = f"{name}: largest relative error on [-9, -2] {relative[worst].item():.3g} at x = {x[worst]:.3f}"
        if (relative > 1e-3).any():
            at = {v: relative[(x.double() - v).abs().argmin()].item() for v in (-3.0, -4.0, -5.0)}
            line += f"; over 1e-3 from x = {x[relative > 1e-3].max():.3f} down; at -3, -4, -5: " + ", ".join(
                f"{e:.2g}" for e in at.values())
        print(line)


if __name__ == "__main__":
    main()
