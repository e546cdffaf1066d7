"""Which CUDA-graph capture patterns work, for torch's ops and ours (debugging aid for the graph test)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import activations  # noqa: E402


def capture(fn, seed_inside, eager_first=False):
    x = torch.randn(4099, device="cuda", requires_grad=True)
    grad = torch.randn(4099, device="cuda")
    if eager_first:
        torch.autograd.grad(fn(x), x, grad)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.autograd.grad((fn(x) * grad).sum(), x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            y = fn(x)
            (g,) = torch.autograd.grad((y * grad).sum(), x) if seed_inside else torch.autograd.grad(y, x, grad)
        graph.replay()
        torch.cuda.synchronize()
        return "ok"
    except Exception as error:
        return str(error).splitlines()[0][:90]


for name, fn in [("torch.relu", torch.relu), ("ours relu", activations.relu), ("torch.selu", torch.selu),
                 ("ours selu", activations.selu), ("ours relu no-grad fwd", lambda t: activations.relu(t.detach()) + t)]:
    print(f"{name:24s} {capture(fn, True)} | eager backward first: {capture(fn, True, eager_first=True)}")
    torch.cuda.synchronize()
