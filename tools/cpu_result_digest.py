"""Digests of the CPU kernels' results over every 61st float32 bit pattern (both signs, subnormals, inf, NaN) and
a few specials, in float32, bfloat16 and float16, to check that two builds give the same bits.

    ACTIVATIONS_CPU_ONLY=1 python tools/cpu_result_digest.py path/to/activations.py LABEL
"""

import hashlib
import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("activations", sys.argv[1])
activations = importlib.util.module_from_spec(spec)
sys.modules["activations"] = activations
spec.loader.exec_module(activations)
ops = torch.ops.activations

patterns = torch.arange(0, 2**32, 61, dtype=torch.int64) - 2**31
x = torch.cat([patterns.to(torch.int32).view(torch.float32),
               torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45])])
g = torch.full_like(x, 0.75)
SELU = (1.6732632423543772, 1.0507009873554805)
digests = {}
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    xd, gd = x.to(dtype), g.to(dtype)
    results = {
        "elu": ops.elu(xd, 1.0),
        "selu": ops.selu(xd),
        "elu_backward": ops.elu_backward(gd, xd, 1.0, 1.0, False),
        "selu_backward": ops.elu_backward(gd, xd, *SELU, False),
        "elu_backward_from_output": ops.elu_backward(gd, ops.elu(xd, 0.5), 0.5, 1.0, True),
        "relu": ops.relu(xd),
    }
    for name, y in results.items():
        bits = y.view({4: torch.int32, 2: torch.int16}[y.element_size()])
        digests[f"{name}/{str(dtype).removeprefix('torch.')}"] = hashlib.sha256(bits.numpy().tobytes()).hexdigest()[:12]
print(sys.argv[2], digests)
