"""Benchmark our ReLU, ELU and SELU kernels (activations.py) against torch's own, on the GPU.

    python bench.py                            # the main run (below)
    python bench.py --no-compile               # the same without the torch.compile column
    python bench.py --sweep --plot gbps.png    # GB/s against size, 2^10 ... 2^31 elements
    python bench.py --overhead                 # only the cost of one small call
    python bench.py --build 5                  # only the first (compiling) and a later import, 5 times each
    python bench.py --ops relu --dtypes bf16 --directions backward,step --sizes 2^20,2^24 --reps 50 --json out.json

The main run takes KernelBench's shape, 4096 x 393216 (1.6e9 elements), in float32, bfloat16 and float16
(float64 only when --dtypes names it), and times three directions for ours, torch's function and torch.compile
of torch's function:
    forward    the inference forward under torch.no_grad() (ours then writes no ReLU mask);
    backward   torch.autograd.grad(y, x, g, retain_graph=True) on a graph built beforehand: the backward alone;
    step       forward with grad, then autograd.grad: one training step of the layer.
It then prints the peak memory of a step (as timed, and inside a network, where the gradient reaching the layer is
a temporary) and what the autograd graph keeps, and the wall-clock cost of one call at 1024 elements (the
--overhead section). Without a GPU it runs a small CPU benchmark instead (2^22 elements, float32 and bfloat16,
torch.compile only with --compile).

Times are medians of --reps samples after a warm-up; on the GPU each sample is a pair of CUDA events, and calls
shorter than about a millisecond are batched into one sample. GB/s counts the bytes a pass must move (see
bytes_moved), and "% copy" relates that rate to a device-to-device copy of the same number of bytes measured in
the same run: the ceiling of a memory-bound op. Before a cell is timed, ours is checked against torch's result
(torch.testing.assert_close); a mismatch stops the run with exit status 1.

--sweep times the forward (or --directions) over sizes (--sizes; default 2^10 ... 2^31 on the GPU, 2^10 ... 2^24 on
the CPU) in float32 and bfloat16, ours against torch and the copy rate. On the GPU a forward of up to 256 MiB is
timed by replaying its calls from a CUDA graph, so the kernels run back to back as in a busy network (at small
sizes plain calls from Python time the host's launch path instead, for ours and torch's alike), in three rounds
that alternate ours and torch's; the plain-call ratio is printed beside it, and --overhead times the host side.
--json writes every number as a list of dicts (key "kind": run, copy, cell, overhead, build); --plot draws the
sweep's GB/s (implies --sweep; needs matplotlib).

--build times `import activations` on top of `import torch` in new processes: with an empty cache (it compiles
what this machine builds; ACTIVATIONS_CPU_ONLY=1 for the CPU kernels alone) and then with that cache filled.
"""

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations  # noqa: E402  (compiles our kernels on first use, then loads them from the cache)

ELU_ALPHA = 1.0

# op -> (ours, torch's)
OPS = {
    "relu": (activations.relu, torch.relu),
    "elu": (lambda x: activations.elu(x, ELU_ALPHA), lambda x: F.elu(x, ELU_ALPHA)),
    "selu": (activations.selu, torch.selu),
}
# The same torch ops called as custom operators are called from Python (torch.ops.<namespace>.<op>.default): the
# dispatch cost any operator registered with TORCH_LIBRARY pays, for the overhead table.
TORCH_OPS_PATH = {
    "relu": torch.ops.aten.relu.default,
    "elu": lambda x: torch.ops.aten.elu.default(x, ELU_ALPHA),
    "selu": torch.ops.aten.selu.default,
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp64": "float64"}
DIRECTIONS = ("forward", "backward", "step")

# torch.testing.assert_close's atol and rtol for ours against torch's.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}

KERNELBENCH_SHAPE = (activations.batch_size, activations.dim)
CPU_NUMEL = 2**22
GPU_SWEEP = [2**k for k in range(10, 32)]
CPU_SWEEP = [2**k for k in range(10, 25)]

WARMUP = 3
MIN_SAMPLE_MS = 1.0  # calls shorter than this are batched, so event resolution and launch jitter stay small
MAX_BATCH = 1000
# The sweep times the forward at sizes up to GRAPH_MAX_BYTES per tensor through CUDA graphs of up to
# MAX_GRAPH_CALLS calls (see time_ms); above it a kernel outlasts the host side of a call, and plain back-to-back
# calls keep the GPU busy.
GRAPH_MAX_BYTES = 2**28
MAX_GRAPH_CALLS = 100
# ... in rounds that alternate ours and torch's, each keeping its best: once on the H100 machine one
# implementation's samples of a cell all ran 2-5x slower than before and after (both timings of it, graph and
# plain calls), which one round turns into a false 0.21x.
GRAPH_ROUNDS = 3
CHECK_CHUNK = 2**26  # assert_close makes several temporaries of its inputs' size: compare big tensors in slices
OVERHEAD_NUMEL, OVERHEAD_CALLS, OVERHEAD_ROUNDS = 1024, 2000, 5

# ---------------------------------------------------------------------------------------------------------------
# Device helpers and the timing helper


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device):
    """Hand freed memory back, so that the next cell's tensors (6.4 GB each at the big shape) fit."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def sample_ms(fn, device, calls, samples, wall_clock=False):
    """Milliseconds per call of fn, one number per sample of `calls` back-to-back calls.

    On the GPU a sample is the time between two CUDA events recorded on the current stream around the calls
    (device time; the host never waits inside a sample). With wall_clock, or on the CPU, it is host time between
    two synchronizations, which includes the dispatch and launch cost that small calls are made of."""
    if device.type == "cuda" and not wall_clock:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
        for start, end in events:
            start.record()
            for _ in range(calls):
                fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / calls for start, end in events]
    times = []
    for _ in range(samples):
        synchronize(device)
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - begin) * 1e3 / calls)
    return times


def time_ms(fn, device, reps, graph=False):
    """Median milliseconds per call of fn, after warm-up calls (compilation, allocator, caches).

    With graph (CUDA only), the calls of a sample are captured once in a CUDA graph and each sample times one
    replay: the GPU then runs the kernels back to back, with no gaps where it waits for the host to launch the
    next one. That is the kernels' own time, what a size sweep compares; at 2^20-2^23 elements a call's host side
    (Python, dispatch, launch: 7-20 us on the H100 machine) outlasts its kernel (2-25 us), so plain back-to-back
    calls time the host. --overhead measures the host side."""
    for _ in range(WARMUP):
        fn()
    (once,) = sample_ms(fn, device, 1, 1)
    calls = max(1, min(MAX_GRAPH_CALLS if graph else MAX_BATCH, math.ceil(MIN_SAMPLE_MS / max(once, 1e-6))))
    if not graph:
        return statistics.median(sample_ms(fn, device, calls, reps))
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        for _ in range(calls):
            fn()
    captured.replay()  # warm-up
    samples = sample_ms(captured.replay, device, 1, reps)
    del captured
    return statistics.median(samples) / calls


# ---------------------------------------------------------------------------------------------------------------
# The copy floor and the bytes each pass must move

COPY_RATES = {}  # bytes -> record, measured once per run


def copy_gbps(nbytes, device, reps, graph=False):
    """Best device-to-device copy rate for buffers of nbytes, counting bytes read + written: the ceiling of an
    elementwise op, timed the same way as the op (graph: see time_ms). float32 and float16 copies are timed;
    bfloat16's copy_ is slower than either on the H100 (DESIGN.md), so it would understate the ceiling."""
    key = (nbytes, graph)
    if key not in COPY_RATES:
        record = {"kind": "copy", "bytes": nbytes, "graph": graph}
        for dtype in (torch.float32, torch.float16):
            src = torch.randn(max(1, nbytes // dtype.itemsize), device=device, dtype=dtype)
            dst = torch.empty_like(src)
            ms = time_ms(lambda: dst.copy_(src), device, reps, graph)
            record[f"{dtype_name(dtype)}_gbps"] = gbps(2 * src.numel() * src.element_size(), ms)
            del src, dst
            release(device)
        record["gbps"] = max(record["float32_gbps"], record["float16_gbps"])
        COPY_RATES[key] = record
        print(
            f"copy floor for {fmt_bytes(nbytes)}{' (CUDA graph)' if graph else ''}: "
            f"float32 {record['float32_gbps']:.0f} GB/s, float16 {record['float16_gbps']:.0f} GB/s",
            flush=True,
        )
    return COPY_RATES[key]["gbps"]


def bytes_moved(op, impl, direction, numel, itemsize):
    """The fewest bytes one pass must read and write. What the forward saves for the backward is the input or the
    output (no extra bytes) except for our ReLU, which also writes a 1-bit mask and reads it back instead of a
    full tensor. torch.compile's rows are counted as torch's."""
    tensor = numel * itemsize
    mask = op == "relu" and impl == "ours"
    saved = (numel + 7) // 8 if mask else tensor
    forward = 2 * tensor  # read x, write y (the timed forward runs without grad: no mask)
    backward = 2 * tensor + saved  # read grad and the saved tensor, write grad_in
    return {"forward": forward, "backward": backward, "step": forward + (saved if mask else 0) + backward}[direction]


def gbps(nbytes, ms):
    return None if ms is None else nbytes / ms / 1e6


# ---------------------------------------------------------------------------------------------------------------
# One cell: (op, dtype, size, direction) for every implementation


def make_pass(fn, x, g, direction):
    """A callable that runs one `direction` pass of fn on x and returns the tensors to check."""
    if direction == "forward":

        def forward():
            with torch.no_grad():
                return (fn(x),)

        return forward
    xg = x.detach().requires_grad_()
    if direction == "backward":
        y = fn(xg)  # built once: each call below runs the backward kernel only
        return lambda: torch.autograd.grad(y, xg, g, retain_graph=True)

    def step():
        y = fn(xg)
        return (y, *torch.autograd.grad(y, xg, g))

    return step


def check_close(actual, expected, what):
    """assert_close on each pair, slice by slice; raises AssertionError naming the cell."""
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            raise AssertionError(f"{what}: shape {tuple(a.shape)}, torch gives {tuple(e.shape)}")
        tol = TOLERANCE[e.dtype]
        a, e = a.detach().reshape(-1), e.detach().reshape(-1)
        for start in range(0, e.numel(), CHECK_CHUNK):
            end = min(start + CHECK_CHUNK, e.numel())
            try:
                torch.testing.assert_close(a[start:end], e[start:end], atol=tol, rtol=tol)
            except AssertionError as error:
                raise AssertionError(f"{what}: differs from torch in elements {start}..{end}: {error}") from None


def peak_bytes(run, device):
    """Peak bytes run() allocates over what was allocated before it."""
    release(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    return torch.cuda.max_memory_allocated(device) - base


def step_memory(fn, x, g, device):
    """{name: bytes} of a step's memory: its peak with the caller's gradient (the timed step), its peak inside a
    network, and what the autograd graph keeps alive once the forward's output is dropped.

    The timed step's peak holds y and grad_in either way, and our ReLU's mask too. Inside a network the gradient
    reaching the layer is a temporary that only autograd holds: here (fn(x) * 2).sum() and its backward, where
    our backward writes grad_in into that temporary while torch's allocates it. What the graph keeps is what the
    saved tensor costs a network whose next layer does not keep y: torch's ReLU keeps y (n elements), ours a mask
    (n/8 bytes); ELU and SELU, torch's and ours, keep the input, which is alive anyway (0 here)."""
    memory = {"step_peak": peak_bytes(make_pass(fn, x, g, "step"), device)}

    def network_step():
        (fn(x.detach().requires_grad_()) * 2).sum().backward()

    memory["network_step_peak"] = peak_bytes(network_step, device)
    release(device)
    base = torch.cuda.memory_allocated(device)
    y = fn(x.detach().requires_grad_())
    node = y.grad_fn
    del y
    memory["graph"] = torch.cuda.memory_allocated(device) - base
    del node
    return memory


def run_cell(record, impls, x, g, device, reps, graphs=False):
    """Checks ours (and torch.compile) against torch, then times each implementation; fills record. With graphs
    (the sweep), a CUDA forward of up to GRAPH_MAX_BYTES is timed through CUDA graphs (see time_ms) and as plain
    calls (the *_calls_ms numbers), in GRAPH_ROUNDS rounds that alternate the implementations, each keeping its
    best round."""
    op, direction = record["op"], record["direction"]
    numel, itemsize = x.numel(), x.element_size()
    graph = graphs and device.type == "cuda" and direction == "forward" and numel * itemsize <= GRAPH_MAX_BYTES
    record["timing"] = "cuda graph" if graph else "calls"
    record["copy_gbps"] = copy_rate = copy_gbps(numel * itemsize, device, reps, graph)
    reference = make_pass(impls["torch"], x, g, direction)()
    best = {}  # impl -> [ms, plain-calls ms]
    for round_ in range(GRAPH_ROUNDS if graph else 1):
        for impl, fn in impls.items():
            if round_ and impl not in best:
                continue  # it failed in the first round (torch.compile)
            try:
                run = make_pass(fn, x, g, direction)
                if round_ == 0 and impl != "torch":
                    check_close(run(), reference, f"{impl} {op} {record['dtype']} {direction}")
                times = [time_ms(run, device, reps, graph), time_ms(run, device, reps) if graph else None]
                if round_ == 0 and direction == "step" and device.type == "cuda":
                    for what, nbytes in step_memory(fn, x, g, device).items():
                        record[f"{impl}_{what}_bytes"] = nbytes
            except Exception as error:  # torch.compile may fail on a given torch/GPU: a note, not the end of the run
                if impl != "compile":
                    raise
                record["compile_error"] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
                continue
            finally:
                run = None  # drops the backward's graph before the next implementation builds its own
                release(device)
            if impl in best:  # a later round: keep the better of each time
                times = [None if t is None else min(t, kept) for t, kept in zip(times, best[impl])]
            best[impl] = times
    for impl in impls:
        ms, calls_ms = best.get(impl, (None, None))
        nbytes = bytes_moved(op, impl, direction, numel, itemsize)
        rate = gbps(nbytes, ms)
        record.update(
            {
                f"{impl}_ms": ms,
                f"{impl}_bytes": nbytes,
                f"{impl}_gbps": rate,
                f"{impl}_pct_copy": None if rate is None else 100 * rate / copy_rate,
            }
        )
        if graph:
            record[f"{impl}_calls_ms"] = calls_ms
    ours, theirs = record["ours_ms"], record["torch_ms"]
    record["speedup"] = theirs / ours if ours and theirs else None
    if graph:
        ours, theirs = record.get("ours_calls_ms"), record.get("torch_calls_ms")
        record["calls_speedup"] = theirs / ours if ours and theirs else None


def compiled(fn):
    """torch.compile(fn) on an empty dynamo cache, so one compiled function per (op, dtype) never meets the
    recompile limit. Most failures surface at the first call, where run_cell notes them."""
    try:
        torch._dynamo.reset()
        return torch.compile(lambda x: fn(x))  # a Python function: older dynamo cannot wrap a builtin itself
    except Exception as error:  # e.g. a Python version dynamo does not support

        def unavailable(x):
            raise RuntimeError(f"torch.compile: {error}")

        return unavailable


def run_cells(ops, dtypes, shapes, directions, device, reps, with_compile, graphs=False):
    """Every cell, one progress line as each finishes; returns the records. graphs: see run_cell."""
    records = []
    total, done = len(ops) * len(dtypes) * len(shapes) * len(directions), 0
    for op in ops:
        ours, theirs = OPS[op]
        for dtype in dtypes:
            for shape in shapes:
                impls = {"torch": theirs, "ours": ours}  # torch first: its result is the reference
                if with_compile:
                    impls["compile"] = compiled(theirs)
                x = torch.randn(shape, device=device, dtype=dtype)
                # The incoming gradient is uniform in [-1, 1): a backward's rounding error scales with |g|, so with
                # |g| <= 1 the check's tolerance bounds the error of the derivative itself, as it bounds the
                # forward's.
                g = torch.rand_like(x).mul_(2).sub_(1) if set(directions) != {"forward"} else None
                for direction in directions:
                    record = {"kind": "cell", "op": op, "dtype": dtype_name(dtype), "direction": direction,
                              "numel": x.numel(), "shape": list(x.shape)}
                    try:
                        run_cell(record, impls, x, g, device, reps, graphs)
                    except torch.cuda.OutOfMemoryError:
                        record["error"] = "out of memory"
                    release(device)
                    records.append(record)
                    done += 1
                    print(f"[{done:>3}/{total}] {progress_line(record)}", flush=True)
                del x, g
                release(device)
    return records


# ---------------------------------------------------------------------------------------------------------------
# Small-call overhead


def run_overhead(ops, device):
    """Wall-clock time per call at 1024 float32 elements, with and without requires_grad: here the dispatcher,
    autograd and launch costs are the whole cost. Best of a few rounds of many calls. The torch.ops column is
    torch's own op entered the way every custom operator is entered from Python: the floor for ours."""
    records = []
    for op in ops:
        ours, theirs = OPS[op]
        for requires_grad in (False, True):
            x = torch.randn(OVERHEAD_NUMEL, device=device).requires_grad_(requires_grad)
            record = {"kind": "overhead", "op": op, "dtype": "float32", "numel": OVERHEAD_NUMEL}
            record["requires_grad"] = requires_grad
            for impl, fn in (("ours", ours), ("torch", theirs), ("torch_ops", TORCH_OPS_PATH[op])):
                sample_ms(lambda: fn(x), device, OVERHEAD_CALLS // 10, 1, wall_clock=True)  # warm-up
                best = min(sample_ms(lambda: fn(x), device, OVERHEAD_CALLS, OVERHEAD_ROUNDS, wall_clock=True))
                record[f"{impl}_us"] = best * 1e3
            record["ratio"] = record["ours_us"] / record["torch_us"]
            records.append(record)
            print(
                f"overhead {op:<5} requires_grad={requires_grad!s:<5} ours {record['ours_us']:.2f} us, "
                f"torch {record['torch_us']:.2f} us, torch via torch.ops {record['torch_ops_us']:.2f} us, "
                f"ours/torch {record['ratio']:.2f}",
                flush=True,
            )
    return records


# ---------------------------------------------------------------------------------------------------------------
# Build time (--build)

# Run in a new process: how long `import activations` takes on top of `import torch`, and what it did.
IMPORT_PROBE = """
import json, sys, time
import torch
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import activations
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "compiled": activations.BUILD["compiled"], "cuda": activations.BUILD["cuda"]}))
"""


def time_import(cache_dir):
    """{'seconds', 'compiled', 'cuda'} of one `import activations` in a new process whose cache is cache_dir."""
    import subprocess

    env = {**os.environ, "ACTIVATIONS_CACHE_DIR": cache_dir}
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE, here], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench.py: importing activations failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def run_build_times(runs):
    """A cold import (an empty cache: it compiles) then a cached import, `runs` times, each in a new process and
    counted from after `import torch`: what the first and every later import of a script costs. It builds what
    this machine builds (ACTIVATIONS_CPU_ONLY=1: the CPU kernels only)."""
    import tempfile

    records = []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="activations-bench-") as cache:
            cold, cached = time_import(cache), time_import(cache)
        if not cold["compiled"] or cached["compiled"]:
            sys.exit(f"bench.py: expected one build then a cached load, got {cold} then {cached}")
        what = "CPU + CUDA" if cold["cuda"] else "CPU"
        records.append({"kind": "build", "what": what, "cold_s": cold["seconds"], "cached_s": cached["seconds"]})
        print(f"[{run + 1}/{runs}] {what} build: cold import {cold['seconds']:.1f} s, "
              f"cached import {cached['seconds']:.3f} s", flush=True)
    return records


def print_build_times(records):
    rows = []
    for what in dict.fromkeys(r["what"] for r in records):
        cold = [r["cold_s"] for r in records if r["what"] == what]
        cached = [r["cached_s"] for r in records if r["what"] == what]
        rows.append([what, f"{min(cold):.1f}", f"{statistics.median(cold):.1f}", f"{max(cold):.1f}",
                     f"{statistics.median(cached):.3f}"])
    title = f"Import time on top of `import torch`, {len(records)} runs, {os.cpu_count()} CPUs (seconds)"
    print_table(title, ["build", "cold min", "cold median", "cold max", "cached median"], rows)


# ---------------------------------------------------------------------------------------------------------------
# Output


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def fmt(value, spec, suffix=""):
    return "n/a" if value is None else format(value, spec) + suffix


def fmt_size(numel):
    return f"2^{numel.bit_length() - 1}" if numel & (numel - 1) == 0 else str(numel)


def fmt_bytes(nbytes):
    if nbytes is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def impls_of(records):
    return [impl for impl in ("ours", "torch", "compile") if any(f"{impl}_ms" in r for r in records)]


def progress_line(r):
    if "error" in r:
        return f"{r['op']} {r['dtype']} {r['direction']} {fmt_size(r['numel'])}: {r['error']}"
    times = ", ".join(f"{impl} {fmt(r[f'{impl}_ms'], '.4g', ' ms')}" for impl in impls_of([r]))
    graph = r.get("timing") == "cuda graph"
    line = (
        f"{r['op']:<5} {r['dtype']:<8} {r['direction']:<8} {fmt_size(r['numel']):>5}: {times}"
        f"{' (CUDA graph)' if graph else ''}; torch/ours {fmt(r['speedup'], '.2f', 'x')}, ours "
        f"{fmt(r['ours_gbps'], '.0f')} GB/s = {fmt(r['ours_pct_copy'], '.1f')}% of copy ({r['copy_gbps']:.0f} GB/s)"
    )
    if graph:
        line += f"; as plain calls torch/ours {fmt(r.get('calls_speedup'), '.2f', 'x')}"
    return line + (f"  [compile: {r['compile_error']}]" if "compile_error" in r else "")


def print_table(title, headers, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    print(f"\n{title}")
    for row in [headers, ["-" * w for w in widths], *rows]:
        texts = [str(cell).rjust(w) if i else str(cell).ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join(texts))
    sys.stdout.flush()


def print_cells(records, title):
    impls = impls_of(records)
    sized = len({r["numel"] for r in records}) > 1
    headers = ["op", "dtype", "direction"] + (["elements"] if sized else [])
    headers += [f"{impl} ms" for impl in impls]
    headers += ["torch/ours", "ours GB/s", "ours % copy", "torch % copy", "copy GB/s"]
    graphs = any(r.get("timing") == "cuda graph" for r in records)
    headers += ["timing", "plain calls torch/ours"] if graphs else []
    rows = []
    for r in records:
        row = [r["op"], r["dtype"], r["direction"]] + ([fmt_size(r["numel"])] if sized else [])
        row += [fmt(r.get(f"{impl}_ms"), ".4f" if graphs else ".3f") for impl in impls]
        row += [fmt(r.get("speedup"), ".2f", "x"), fmt(r.get("ours_gbps"), ".0f"), fmt(r.get("ours_pct_copy"), ".1f")]
        row += [fmt(r.get("torch_pct_copy"), ".1f"), fmt(r.get("copy_gbps"), ".0f")]
        row += [r.get("timing", ""), fmt(r.get("calls_speedup"), ".2f", "x")] if graphs else []
        rows.append(row)
    print_table(title, headers, rows)
    if graphs:
        print(
            "  timing 'cuda graph': the calls of a sample replayed from one CUDA graph, the kernels' own time; "
            "'plain calls torch/ours' times the same calls from Python, launch gaps included (the host side of a "
            "call outlasts its kernel there; --overhead measures it)."
        )
    for r in records:
        if "compile_error" in r or "error" in r:
            print(f"  note: {r['op']} {r['dtype']} {r['direction']}: {r.get('error') or r['compile_error']}")


def print_memory(records):
    steps = [r for r in records if "ours_step_peak_bytes" in r or "torch_step_peak_bytes" in r]
    if not steps:
        if any(r["direction"] == "step" for r in records):
            print("\n(Memory of a step is measured on CUDA only.)")
        return
    impls = [impl for impl in impls_of(steps) if any(f"{impl}_graph_bytes" in r for r in steps)]
    columns = [("step_peak", "step peak"), ("network_step_peak", "in-network step peak"), ("graph", "graph keeps")]
    headers = ["op", "dtype", "elements"] + [f"{impl} {title}" for _, title in columns for impl in impls]
    rows = [
        [r["op"], r["dtype"], fmt_size(r["numel"])]
        + [fmt_bytes(r.get(f"{impl}_{what}_bytes")) for what, _ in columns for impl in impls]
        for r in steps
    ]
    print_table(
        "Memory of one step (torch.cuda.max_memory_allocated over what was allocated before it): the timed step, "
        "with the caller's gradient; the step inside a network, (f(x) * 2).sum() and its backward, where the "
        "gradient reaching f is a temporary; and what the autograd graph keeps once the forward's output is dropped",
        headers,
        rows,
    )


def print_overhead(records):
    rows = [
        [r["op"], str(r["requires_grad"]), f"{r['ours_us']:.2f}", f"{r['torch_us']:.2f}", f"{r['torch_ops_us']:.2f}",
         f"{r['ratio']:.2f}"]
        for r in records
    ]
    title = f"Time per call at {OVERHEAD_NUMEL} float32 elements (wall clock, best of {OVERHEAD_ROUNDS} rounds)"
    print_table(title, ["op", "requires_grad", "ours us", "torch us", "torch via torch.ops us", "ours/torch"], rows)


def plot(records, path):
    """GB/s against size: one panel per (op, dtype), a line per implementation and direction, and the copy rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [r for r in records if "error" not in r]
    ops = list(dict.fromkeys(r["op"] for r in cells))
    dtypes = list(dict.fromkeys(r["dtype"] for r in cells))
    directions = list(dict.fromkeys(r["direction"] for r in cells))
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(6 * len(dtypes), 4 * len(ops)), squeeze=False)
    for (i, op), (j, dtype) in ((a, b) for a in enumerate(ops) for b in enumerate(dtypes)):
        ax = axes[i][j]
        panel = sorted((r for r in cells if r["op"] == op and r["dtype"] == dtype), key=lambda r: r["numel"])
        for direction in directions:
            rows = [r for r in panel if r["direction"] == direction]
            for impl, marker in zip(impls_of(rows), "os^"):
                label = impl if len(directions) == 1 else f"{impl} {direction}"
                rates = [math.nan if r[f"{impl}_gbps"] is None else r[f"{impl}_gbps"] for r in rows]
                ax.plot([r["numel"] for r in rows], rates, marker=marker, label=label)
        copies = sorted({(r["numel"], r["copy_gbps"]) for r in panel})
        ax.plot([n for n, _ in copies], [c for _, c in copies], "k--", label="copy (read + write)")
        ax.set_xscale("log", base=2)
        ax.set(title=f"{op} {dtype}", xlabel="elements", ylabel="GB/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


# ---------------------------------------------------------------------------------------------------------------
# Command line


def parse_list(text, choices, aliases=None):
    items = [(aliases or {}).get(item.strip(), item.strip()) for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in choices]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    return items


def parse_sizes(text):
    """'1024,1048576' or '2^10,2^20' -> [1024, 1048576]."""
    try:
        sizes = [2 ** int(s[2:]) if s.startswith("2^") else int(s) for s in (s.strip() for s in text.split(",")) if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are element counts such as 1024 or 2^20, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See the module docstring for more.")
    parser.add_argument("--sweep", action="store_true", help="GB/s over a range of sizes (forward, float32 + bf16)")
    parser.add_argument("--overhead", action="store_true", help="time per call at 1024 elements")
    parser.add_argument(
        "--build",
        type=int,
        nargs="?",
        const=3,
        metavar="RUNS",
        help="only time a cold build and a cached import in new processes, RUNS times (default 3)",
    )
    parser.add_argument("--ops", type=lambda t: parse_list(t, list(OPS)), help="e.g. relu,elu (default: all)")
    parser.add_argument("--dtypes", type=lambda t: parse_list(t, list(DTYPES), DTYPE_ALIASES), help="e.g. bf16,fp16")
    parser.add_argument("--directions", type=lambda t: parse_list(t, DIRECTIONS), help="forward,backward,step")
    parser.add_argument("--sizes", type=parse_sizes, help="element counts, e.g. 1024,1048576 or 2^20")
    parser.add_argument("--reps", type=int, default=20, help="timed samples per measurement (default 20)")
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="time torch.compile of torch's function too (default: on the GPU, not in --sweep)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every number to PATH")
    parser.add_argument("--plot", metavar="PATH", help="PNG of the sweep's GB/s against size (implies --sweep)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.build is not None and args.build < 1:
        parser.error("--build RUNS must be at least 1")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed")
    args.sweep = args.sweep or bool(args.plot)
    return args


def cell_plan(args, on_gpu):
    """(dtypes, shapes, directions, with_compile) of this run's cells: the defaults, narrowed by the options."""
    if args.sweep:
        dtypes, directions = ["float32", "bfloat16"], ["forward"]
        shapes = [(n,) for n in (GPU_SWEEP if on_gpu else CPU_SWEEP)]
    else:
        dtypes = ["float32", "bfloat16", "float16"] if on_gpu else ["float32", "bfloat16"]
        directions = list(DIRECTIONS)
        shapes = [KERNELBENCH_SHAPE if on_gpu else (CPU_NUMEL,)]
    dtypes = [DTYPES[d] for d in args.dtypes or dtypes]
    shapes = [(n,) for n in args.sizes] if args.sizes else shapes
    # torch.compile builds for minutes on a small CPU, and the sweep compares ours with torch and the copy alone.
    with_compile = args.compile if args.compile is not None else on_gpu and not args.sweep
    return dtypes, shapes, args.directions or directions, with_compile


def main(argv=None):
    args = arguments(argv)
    if args.build is not None:
        records = run_build_times(args.build)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)
            print(f"wrote {args.json}")
        print_build_times(records)
        return 0
    torch.manual_seed(0)
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    if on_gpu and activations.BUILD.get("cuda") is False:
        sys.exit(f"bench.py: our CUDA kernels were not built: {activations.BUILD['no_cuda_reason']}")
    name = torch.cuda.get_device_name(device) if on_gpu else f"CPU ({platform.machine()})"
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads", flush=True)
    if not on_gpu:
        print(f"No CUDA GPU here: benchmarking on the CPU ({fmt_size(CPU_NUMEL)} elements unless --sizes says).")

    ops = args.ops or list(OPS)
    main_run = not (args.sweep or args.overhead)
    cells, overhead = [], []
    try:
        if main_run or args.sweep:
            dtypes, shapes, directions, with_compile = cell_plan(args, on_gpu)
            cells = run_cells(ops, dtypes, shapes, directions, device, args.reps, with_compile, graphs=args.sweep)
        if main_run or args.overhead:
            overhead = run_overhead(ops, device)
    except AssertionError as error:
        sys.exit(f"bench.py: FAILED: ours does not match torch: {error}")

    if args.json:
        run = {"kind": "run", "device": name, "torch": torch.__version__, "argv": sys.argv[1:], "reps": args.reps}
        with open(args.json, "w") as f:
            json.dump([run, *COPY_RATES.values(), *cells, *overhead], f, indent=1)
        print(f"wrote {args.json}")
    if cells:
        if len(shapes) == 1:
            size = " x ".join(map(str, shapes[0]))
        else:
            size = f"{fmt_size(min(map(math.prod, shapes)))} to {fmt_size(max(map(math.prod, shapes)))}"
        print_cells(cells, f"{'Sweep' if args.sweep else 'Benchmark'} on {name}: {size} elements, {args.reps} samples")
        print_memory(cells)
    if overhead:
        print_overhead(overhead)
    if args.plot:
        plot(cells, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
