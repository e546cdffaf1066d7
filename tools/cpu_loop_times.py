"""CPU kernel times of one build, to compare builds (compiler flags, sources) in alternating processes.

    ACTIVATIONS_CPU_ONLY=1 python tools/cpu_loop_times.py path/to/activations.py LABEL

Loads the activations.py given (and the kernels/ beside it; each build has its own cache entry) and prints, for
float32 and bfloat16 at 2^22 elements, the lower quartile of 15 calls in ms of the ELU forward and backward and
the ReLU forward and backward, on one line.
"""

import importlib.util
import sys
import time

import torch

spec = importlib.util.spec_from_file_location("activations", sys.argv[1])
activations = importlib.util.module_from_spec(spec)
sys.modules["activations"] = activations
spec.loader.exec_module(activations)
ops = torch.ops.activations


def lower_quartile_ms(fn, reps=15):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 4] * 1e3


results = {}
for dtype in (torch.float32, torch.bfloat16):
    x, g = torch.randn(1 << 22, dtype=dtype), torch.randn(1 << 22, dtype=dtype)
    _, mask = ops.relu_with_mask(x)
    name = str(dtype).removeprefix("torch.")
    results[f"elu_f_{name}"] = lower_quartile_ms(lambda: ops.elu(x, 1.0))
    results[f"elu_b_{name}"] = lower_quartile_ms(lambda: ops.elu_backward(g, x, 1.0, 1.0, False))
    results[f"relu_f_{name}"] = lower_quartile_ms(lambda: ops.relu(x))
    results[f"relu_b_{name}"] = lower_quartile_ms(lambda: ops.relu_backward(g, mask))
print(sys.argv[2], " ".join(f"{key}={ms:.2f}" for key, ms in results.items()), flush=True)
