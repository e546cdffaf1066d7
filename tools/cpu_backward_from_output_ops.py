"""The CPU backwards from the output (tanh, sigmoid: grad and y in, grad_in out), 2^22 elements, with 16 threads and
with 2: the operators alone (torch's tanh_backward / sigmoid_backward against our internal `backward`), the same
through torch.autograd.grad (as bench.py times them), and torch.mul of the same two tensors (the same bytes, torch's
elementwise loop). Samples of all five taken in turn (bench.interleaved_ms), four rounds, the order reversed in every
other one; microseconds a call.

    python tools/cpu_backward_from_output_ops.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402
import bench  # noqa: E402


def main():
    bench.keep_freed_memory()
    bench.warm_torch_cpu_math()
    cpu = torch.device("cpu")
    n = 1 << 22
    for threads in (16, 2):
        torch.set_num_threads(threads)
        torchs = {"tanh": torch.ops.aten.tanh_backward, "sigmoid": torch.ops.aten.sigmoid_backward}
        for op, torchs_backward in torchs.items():
            for dtype in (torch.float32, torch.float64):
                x, grad = torch.randn(n, dtype=dtype), torch.rand(n, dtype=dtype)
                y = getattr(torch, op)(x)
                x_ = x.clone().requires_grad_()
                y_torch, y_ours = getattr(torch, op)(x_), getattr(activations, op)(x_)
                runs = {
                    "torch op": lambda: torchs_backward(grad, y),
                    "ours op": lambda: torch.ops.activations.backward(grad, y, op, [], "output"),
                    "torch autograd": lambda: torch.autograd.grad(y_torch, x_, grad, retain_graph=True),
                    "ours autograd": lambda: torch.autograd.grad(y_ours, x_, grad, retain_graph=True),
                    "mul": lambda: torch.mul(grad, y),
                }
                torch.testing.assert_close(runs["ours op"](), runs["torch op"]())
                for round_ in range(4):  # the order of the samples reversed every other round, as bench.py does
                    order = list(runs) if round_ % 2 == 0 else list(runs)[::-1]
                    ms = bench.interleaved_ms({name: runs[name] for name in order}, cpu, 40)
                    times = "  ".join(f"{name} {ms[name] * 1e3:.0f}us" for name in runs)
                    print(f"threads {threads} {op} {dtype} ({'in order' if round_ % 2 == 0 else 'reversed'}): {times}",
                          flush=True)


if __name__ == "__main__":
    main()
