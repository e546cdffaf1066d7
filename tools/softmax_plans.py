"""Times our softmax / log_softmax (forward or backward operator) at one shape under the CUDA path named by
ACTIVATIONS_SOFTMAX_PLAN (see kernels/softmax.cu: "threads,elements,cluster" or "split"; unset: the default
choice), beside torch's. One process per plan (the variable is read once):

    for plan in "" split 1024,16,8; do ACTIVATIONS_SOFTMAX_PLAN=$plan python tools/softmax_plans.py 4096,131072 bfloat16 softmax forward; done
"""

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


def main():
    shape = tuple(int(v) for v in sys.argv[1].split(","))
    dtype, name, direction = getattr(torch, sys.argv[2]), sys.argv[3], sys.argv[4]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = activations.REDUCTIONS[name].torch_function(x, -1)
    g = torch.randn_like(x)
    if direction == "forward":
        ours, theirs = (lambda: getattr(activations, name)(x, -1)), (lambda: activations.REDUCTIONS[name].torch_function(x, -1))
    else:
        aten = getattr(torch.ops.aten, f"_{name}_backward_data").default
        ours = lambda: getattr(torch.ops.activations, name + "_backward").default(g, y, -1)  # noqa: E731
        theirs = lambda: aten(g, y, -1, dtype)  # noqa: E731
    torch.testing.assert_close(ours(), theirs(), atol=1e-2, rtol=1e-2)
    ours_ms, torch_ms = time_ms(ours), time_ms(theirs)
    plan = os.environ.get("ACTIVATIONS_SOFTMAX_PLAN") or "default"
    print(f"{name} {direction} {'x'.join(map(str, shape))} {sys.argv[2]} plan {plan:<12} ours {ours_ms:7.3f} ms  "
          f"torch {torch_ms:7.3f} ms  {torch_ms / ours_ms:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
