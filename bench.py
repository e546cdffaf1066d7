"""Benchmark our activation kernels (activations.py) against torch's own, on the GPU (without one, on the CPU).

    python bench.py                            # the main run (below)
    python bench.py --no-compile               # the same without the torch.compile column
    python bench.py --kernelbench              # only every KernelBench problem, timed as KernelBench times it
    python bench.py --vmap                     # only torch.func.vmap of every op
    python bench.py --models                   # only training steps of small networks, torch's modules against ours
    python bench.py --ddp                      # only a DDP training step of the MLP over every GPU here (2 or more)
    python bench.py --main --kernelbench --models --json out.json   # the main run and the sections named
    python bench.py --sweep --plot gbps.png    # GB/s against size, 2^10 ... 2^31 elements
    python bench.py --overhead                 # only the cost of one small call
    python bench.py --build 5                  # only the first (compiling) and a later import, 5 times each
    python bench.py --softmax                  # only softmax and log_softmax over the issue's row lengths
    python bench.py --chunked                  # only relu, silu, gelu on half of a tensor (gated MLPs, CNN maps)
    python bench.py --ops relu,gelu --dtypes bf16 --directions backward,step --sizes 2^20,2^24 --reps 50 --json out.json

The rows come from activations.OPS, in its order, each op at its default parameters (torch's), plus gelu with
approximate="tanh" and, for KernelBench's swish and softsign problems, a row whose torch side is KernelBench's own
expression (x * torch.sigmoid(x), x / (1 + torch.abs(x)); activations.PROBLEMS) instead of torch's op: that is what
a KernelBench score compares against. Such a row is checked against torch's op, not against the expression. --ops
selects by op name (silu also selects the swish row, softsign its expression row, gelu both gelu rows).

The main run takes KernelBench's shape, 4096 x 393216 (1.6e9 elements), in float32, bfloat16 and float16
(float64 only when --dtypes names it), and times three directions for ours, torch's function and torch.compile
of torch's function:
    forward    the inference forward under torch.no_grad() (ours then writes no mask);
    backward   torch.autograd.grad(y, x, g, retain_graph=True) on a graph built beforehand: the backward alone;
    step       forward with grad, then autograd.grad: one training step of the layer.
It then prints the peak memory of a step (as timed, and inside a network, where the gradient reaching the layer is
a temporary) and what the autograd graph keeps, the wall-clock cost of one call at 1024 elements (the --overhead
section) and the vmap section. Without a GPU it runs a small CPU benchmark instead (2^22 elements, float32,
bfloat16, float16 and float64, torch.compile only with --compile), each cell in three rounds whose samples alternate
ours and torch's (a slow spell of the memory falls on both alike), with glibc's malloc told to keep freed memory
(keep_freed_memory) so that no call pays page faults, and then an A/A control: torch's forwards timed against
themselves the same way, whose spread says how far from 1.0x a cell reads with no difference in speed.

Times are medians of --reps samples (default 20) after a warm-up; on the GPU each sample is a pair of CUDA events,
and calls shorter than about a millisecond are batched into one sample. GB/s counts the bytes a pass must move (see
bytes_moved: ops whose backward works from a 1-bit mask read that instead of a saved tensor), and "% copy" relates
that rate to the run's copy floor, the ceiling of a memory-bound op: the best of several rounds of a copy of a
fixed number of bytes (a float32 tensor, whatever the cell's dtype), one round before the first row and one after
each row, so the rounds are spread over the run as the cells are. On the GPU that is ONE number per run, the copy
of the run's largest shape in float32 (a copy per dtype made 16-bit cells read 108-111 % of copy on the H100,
where a float16 copy_ once ran at 2763 GB/s against 3034 GB/s for float32). On the CPU each cell divides by the
copy of its own tensor's bytes: the caches hold a table's 16-bit tensors and not all of its float64 ones, so one
number put the float64 forwards of the piecewise-linear ops at 47-62 % and, on another host, 16-bit forwards at
110-131 % (floor_bytes). Progress lines use the best so far, the tables and --json the final floors. Before a
cell is timed, ours is checked against torch's result (torch.testing.assert_close); a cell that fails the check or
raises is reported as an error and the run goes on, and the exit status is then 1.

--sweep times the forward (or --directions) over sizes (--sizes; default 2^10 ... 2^31 on the GPU, 2^10 ... 2^24 on
the CPU) in float32 and bfloat16, ours against torch and the copy rate. Its "% copy" relates each size to a float32
copy of the same bytes at that size, timed as the cells are (small copies are launch-bound: the floor of one size
is not that of another). On the GPU a forward of up to 256 MiB is timed by replaying its calls from a CUDA graph,
so the kernels run back to back as in a busy network (at small sizes plain calls from Python time the host's launch
path instead, for ours and torch's alike), in three rounds that alternate ours and torch's; the plain-call ratio is
printed beside it, and --overhead times the host side. --plot draws the sweep's GB/s (implies --sweep; needs
matplotlib); with --softmax, also a panel per softmax op and dtype: GB/s against row length at the --softmax shapes.

--kernelbench times every KernelBench problem (activations.PROBLEMS; with --ops, the ops' problems) the way
KernelBench's harness does (time_execution_with_cuda_event in its timing.py): Model and ModelNew from
activations.kernelbench(problem) with the problem's init inputs, the problem's own get_inputs() (4096 x 393216
float32; drawn with the GPU as the default device, where KernelBench draws on the host and copies: the same tensor),
3 warm-up calls each followed by a synchronize, torch.cuda.empty_cache(), then per trial: synchronize, flush the L2
cache by filling a 256 MB tensor (torch.empty((32, 1024, 1024), dtype=torch.int64).fill_(42), as KernelBench's
clear_l2_cache), record a CUDA event, call the model once (grad mode on, as KernelBench calls it), record an event,
synchronize. --reps trials of each (default 100), in rounds that alternate ours and the reference so drift hits
both, the first trial of each round dropped (KernelBench drops its first); mean (KernelBench's score), median and
min, and reference/ours of the means and of the medians. Beside them, the same forward as bench.py's main table
times it (back-to-back calls, no flush, under no_grad), so a difference between the two methods shows. On the CPU
the input is 64 x 2^16 and times are wall clock.

--vmap times torch.func.vmap(f) over a 64 x 2^16 float32 input (64 x 2^12 on the CPU) for every op, ours against vmap of torch's
function (medians of CUDA-event samples, short calls batched as above, in alternating rounds, the best of them),
and prints ours/torch (target: within 1.2x). One call of vmap(ours) first runs with warnings turned into errors
(warnings.simplefilter("error")) and with file descriptor 2 captured: functorch's "performance drop ... batching
rule" warning for an operator without a vmap rule is a C++ warning that a call through torch.ops prints to stderr
without passing through Python's warnings.

--models times one training step (forward and loss under bfloat16 autocast, backward, SGD step, zero_grad) of an MLP
(Linear 4096->4096, activation, Linear 4096->4096; batch 8192), a CNN (4 x [Conv2d 64->64 3x3, BatchNorm2d,
activation], channels_last, input 64 x 64 x 64 x 64) and a transformer MLP block (Linear(1024, 4096), activation,
Linear(4096, 1024); 8192 tokens), built from torch's modules, against a deep copy on which
activations.swap_activations put ours; eager, under torch.compile ("compiled": ours hand torch's functions to
inductor, activations.FUSE_UNDER_COMPILE) and under torch.compile with our operators kept ("compiled-ours":
FUSE_UNDER_COMPILE = False); --models eager,compiled picks (on the CPU only eager unless named; --compile/--no-compile
is the main table's alone). Wall clock: 5 rounds that alternate torch's and ours, the best round's median of 20
steps each; on the GPU also the kernels' time per step (torch.profiler over 10 steps), which the host's pace does not
move. Activations: MLP and CNN relu, leaky_relu, elu, selu, silu, gelu, mish; transformer
block gelu, silu (those in activations.OPS and --ops). Before timing, the two models' outputs are compared (relative
error of the norm). On the CPU the sizes are scaled down.

--ddp times one training step of --models's MLP (its GPU shape on each rank) under DistributedDataParallel over
NCCL, one process per GPU (every GPU here; it needs two or more), with torch's modules and with ours (relu, gelu,
silu, those in --ops): DDP_ROUNDS rounds, each timing DDP_STEPS steps of each in turn (the order swapped each round),
wall clock on rank 0 (every rank waits for the others in the gradients' all-reduce); the best round of each.

--main runs the main run beside the sections named (--kernelbench, --vmap, --models, --overhead, --sweep). --json
writes every number as a list of dicts (key "kind": run, copy, cell, chunked, overhead, vmap, kernelbench, model, ddp,
build),
rewritten after each section so that a run cut short keeps what it finished.

--softmax times softmax and log_softmax (activations.REDUCTIONS) over the last dim of the shapes in SOFTMAX_SHAPES
(rows x row length, 1024 ... 4194304, KernelBench's 4096 x 393216 and vocabulary-sized 8192 x 50257 among them) and
over a middle dim, in float32 and bfloat16 (--dtypes): forward (under no_grad) and backward (the backward operator
alone on a saved output: ours activations::softmax_backward, torch's aten::_softmax_backward_data, and
torch.compile of torch's: at KernelBench's shape only, unless --compile), in alternating rounds, medians of CUDA
events. "% floor" relates ours to the bytes a pass
must move (forward: read x, write y; backward: read g and y, write the gradient) at the run's float32 copy rate (on
the CPU, of a copy of the cell's tensor bytes, as in the main table).
Where Liger-Kernel is importable (`liger_kernel.ops.softmax`), softmax over the last dim gets a liger column too: its
LigerSoftmaxFunction forward, and its backward through autograd.grad; the ratio printed is liger/ours.

--chunked times relu, silu and gelu (--ops) on inputs that are half of a contiguous tensor, not one dense block
(CHUNKED_LAYOUTS, 2^22 elements on the CPU, 2^28 on a GPU): "rows", the first half of x.chunk(2, -1), as a fused
gate-and-up projection hands it to SwiGLU, GeGLU or ReGLU (rows x the half's length); "channels", the first half of
x.chunk(2, 1) of a channels_last activation map, as a CNN that splits its channels hands it on (N x C x H x W, rows
of C elements 2C apart). In float32 and bfloat16 (--dtypes), forward, backward (its gradient laid out as the
forward's result) and step, timed and checked as the main table's cells (its copy floor: the logical tensor's
bytes). Our kernels read such rows where they lie (torch's TensorIterator does too); a contiguous copy first, as
they took before, costs a pass over memory.

--build times `import activations` on top of `import torch` in new processes: with an empty cache (it compiles
what this machine builds; ACTIVATIONS_CPU_ONLY=1 for the CPU kernels alone) and then with that cache filled.
"""

import argparse
import contextlib
import copy
import dataclasses
import functools
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Optional

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations  # noqa: E402  (compiles our kernels on first use, then loads them from the cache)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp64": "float64"}
DIRECTIONS = ("forward", "backward", "step")

# torch.testing.assert_close's atol and rtol for ours against torch's.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}

KERNELBENCH_SHAPE = (activations.batch_size, activations.dim)
CPU_NUMEL = 2**22
GPU_SWEEP = [2**k for k in range(10, 32)]
CPU_SWEEP = [2**k for k in range(10, 25)]

DEFAULT_REPS = 20  # samples per measurement of the tables; --reps overrides
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
# plain calls), which one round turns into a false 0.21x. The vmap and model sections time in rounds too.
GRAPH_ROUNDS = 3
CHECK_CHUNK = 2**26  # assert_close makes several temporaries of its inputs' size: compare big tensors in slices
OVERHEAD_NUMEL, OVERHEAD_CALLS, OVERHEAD_ROUNDS = 1024, 2000, 5

# ---------------------------------------------------------------------------------------------------------------
# The rows: activations.OPS, each op bound to its parameters

# op -> (KernelBench problem, its reference expression as printed): the main table also times the expression as
# torch's side (DESIGN.md: torch runs these composites at 25-40 % of the copy rate, its own ops at ~100 %).
KERNELBENCH_EXPRESSIONS = {"silu": ("swish", "x*sigmoid(x)"), "softsign": ("softsign", "x/(1+|x|)")}


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the tables: ours and torch's side as functions of x alone."""

    name: str  # as printed: the op, or the op and what sets the row apart ("gelu (tanh)")
    op: str  # its activations.OPS name: --ops selects by it
    params: dict  # the parameters both sides are called with
    ours: Callable
    torch: Callable  # torch's function, or KernelBench's expression
    reference: Callable  # what ours is checked against: torch's function of the op
    saves: str  # what our backward reads besides the gradient: "mask", "input" or "output"
    torch_op: Optional[Callable]  # torch's op entered through torch.ops.aten (the overhead table); None if none
    expression: bool = False  # torch's side is KernelBench's expression, not torch's op


def bind(fn, params):
    """fn(x, **params) as a function of x alone (by keyword: gelu's approximate is keyword-only); fn itself when
    there are no params (a lambda's frame would add 0.1 us or so to the overhead table's small calls)."""
    return (lambda x: fn(x, **params)) if params else fn


def aten_op(name, params):
    """torch's own operator entered the way every custom operator is entered from Python
    (torch.ops.aten.<name>.default; parameters by keyword, as gelu's approximate is keyword-only there), or None
    where torch has no such operator (softsign is a Python composite)."""
    try:
        op = getattr(torch.ops.aten, name).default
    except AttributeError:
        return None
    return (lambda x: op(x, **params)) if params else op


def table_rows(ops=None):
    """The rows for the ops named (default: all of activations.OPS), in activations.OPS's order."""
    rows = []
    for name, op in activations.OPS.items():
        if ops and name not in ops:
            continue
        defaults = {param.name: param.default for param in op.params}
        variants = [(name, defaults)]
        if name == "gelu":
            variants.append(("gelu (tanh)", {**defaults, "approximate": "tanh"}))
        for label, params in variants:
            theirs = bind(op.torch_function, params)
            rows.append(Row(label, name, params, bind(op.function, params), theirs, theirs, op.saves,
                            aten_op(name, params)))
        problem, expression = KERNELBENCH_EXPRESSIONS.get(name, (None, None))
        if problem in activations.PROBLEMS:
            spec = activations.PROBLEMS[problem]
            assert not spec.init_inputs, "the expression rows are for problems without init inputs"
            rows.append(Row(f"{problem} ({expression})", name, defaults, spec.ours, spec.reference,
                            bind(op.torch_function, defaults), op.saves, None, expression=True))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Device helpers and the timing helpers


def warm_torch_cpu_math():
    """Runs torch's tanh-form GELU once, so that every CPU row compares with torch's faster state, whatever rows run
    before it. On a 2-core AMD EPYC of Zen 4 (results/cpu-epyc-2026-12-07/torch_cpu_state.log) torch's float32
    expm1, log1p and log, and the ELU, SELU and softplus built on them, took 3-10x their time in a process where
    that GELU had not yet run (one thread: expm1 9.8 -> 1.2 ns an element, log1p 11.5 -> 0.9, F.elu 8.6 -> 1.3),
    process-wide, after it had run once on any 1024 elements. The cause was not found: the same Sleef function in
    perf, the same MXCSR and the same page faults in both states."""
    torch.nn.functional.gelu(torch.randn(1024), approximate="tanh")


def keep_freed_memory():
    """On glibc, has malloc keep the memory that freed tensors held, as torch's CUDA caching allocator does on the
    GPU: mmap off (M_MMAP_MAX 0) and no trimming of the heap (M_TRIM_THRESHOLD). By default glibc maps every block
    of 32 MiB or more afresh and unmaps it on free, so each float64 call at 2^22 elements page-faulted its 32 MiB
    output in again: 8193 faults and about 9 ms a call, ours and torch's alike, for a pass that takes 0.7-0.9 ms,
    and every float64 cell read 0.9-1.1x by chance. And glibc trims the top of its heap on free once it passes a
    threshold that follows the blocks freed: a float16 step of ours that saves a mask (0.5 MiB beside the 8 MiB
    tensors) had the heap trimmed and grown again every step, 512-643 page faults a step where torch's step had none.
    Returns what it says it did, or None off glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, ctypes.c_int(2**30)) != 1:
        return None
    return "glibc malloc keeps freed memory (mmap off, trim threshold 1 GiB): calls reuse it, as on the GPU"


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
    calls = calls_per_sample(fn, device, graph)
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


def calls_per_sample(fn, device, graph=False):
    """After warm-up calls (compilation, allocator, caches): how many back-to-back calls make a sample of at least
    MIN_SAMPLE_MS."""
    for _ in range(WARMUP):
        fn()
    (once,) = sample_ms(fn, device, 1, 1)
    return max(1, min(MAX_GRAPH_CALLS if graph else MAX_BATCH, math.ceil(MIN_SAMPLE_MS / max(once, 1e-6))))


def interleaved_ms(fns, device, reps):
    """{name: median ms per call}: reps samples of each callable, taken in turn, the order reversed from one
    sample to the next, so that a slow spell of the machine falls into every callable's samples alike."""
    calls = {name: calls_per_sample(fn, device) for name, fn in fns.items()}
    samples = {name: [] for name in fns}
    for sample in range(reps):
        for name in list(fns) if sample % 2 == 0 else list(fns)[::-1]:
            samples[name] += sample_ms(fns[name], device, calls[name], 1)
    return {name: statistics.median(times) for name, times in samples.items()}


def best_of_rounds(fns, device, reps, rounds):
    """{name: ms} for a dict of callables: `rounds` rounds, the best round of each. A slow spell of the machine
    then costs one round of each implementation rather than all of one (see GRAPH_ROUNDS).

    On the GPU a round times every callable in turn (time_ms, a median), the order alternating from round to round.
    On the CPU a round takes the callables' samples in turn (interleaved_ms): there the memory rate moved 2-3x
    within seconds, and with one side's 20 samples and then the other's the same float32 hardtanh forward (2^22
    elements) read 0.48x and 0.97x torch's in two runs a minute apart; with samples in turn it read 0.97-1.00x in
    five runs (and 0.82x in one full table)."""
    best = {}
    for round_ in range(rounds):
        order = list(fns) if round_ % 2 == 0 else list(fns)[::-1]
        if device.type == "cpu":
            times = interleaved_ms({name: fns[name] for name in order}, device, reps)
        else:
            times = {name: time_ms(fns[name], device, reps) for name in order}
        for name, ms in times.items():
            best[name] = min(ms, best.get(name, math.inf))
    return best


def error_text(error):
    return f"{type(error).__name__}: {error}".splitlines()[0][:600]


# ---------------------------------------------------------------------------------------------------------------
# The copy floor and the bytes each pass must move

COPY_RECORDS = []  # every copy measured in this run, for --json


class CopyFloor:
    """A table's copy floors: for each size in `sizes` (bytes), the best of several rounds of a copy of that many
    bytes (a float32 tensor whatever the cells' dtype, bytes read + written counted), timed as the cells are. The
    main table takes a round of every size before its first row and one after each row, so the rounds are spread
    over the run as the cells are.

    floor_bytes says which size a cell divides by: on the GPU every cell by one, the run's largest tensor in float32
    (one floor per run); on the CPU each cell by its own tensor's bytes, as its caches hold some of a table's
    tensors and not others."""

    def __init__(self, sizes, device, reps):
        self.device, self.reps = device, reps
        self.records = {}
        for nbytes in sorted(set(sizes)):
            self.records[nbytes] = {"kind": "copy", "scope": "run", "bytes": nbytes, "rounds_gbps": [], "gbps": None}
            COPY_RECORDS.append(self.records[nbytes])

    def measure(self):
        """One more round of every size."""
        for nbytes, record in self.records.items():
            src = torch.randn(max(1, nbytes // 4), device=self.device)
            dst = torch.empty_like(src)
            ms = time_ms(lambda: dst.copy_(src), self.device, self.reps)
            del src, dst
            release(self.device)
            record["rounds_gbps"].append(gbps(2 * nbytes, ms))
            record["gbps"] = max(record["rounds_gbps"])

    def rate(self, nbytes):
        """The best rate so far of the copy of nbytes."""
        return self.records[nbytes]["gbps"]

    def describe(self, rounds=False):
        """Each size's floor so far (and its rounds), for the log."""
        texts = []
        for nbytes, record in self.records.items():
            text = f"{fmt_bytes(nbytes)} float32 {record['gbps']:.0f} GB/s"
            if rounds:
                text += " (the best of " + ", ".join(f"{rate:.0f}" for rate in record["rounds_gbps"]) + ")"
            texts.append(text)
        return "; ".join(texts)


def floor_bytes(device, numel, itemsize, largest_numel):
    """The size of the copy whose rate a cell's % of copy divides by (see CopyFloor). On the CPU the cell's own
    tensor's: a 2-core Emerald Rapids VM copied 8-16 MiB float32 tensors at 47-53 GB/s, 32 MiB ones at 35-41 and
    64 MiB or more at 22-26, so against one floor at 2^22 elements (16 MiB) the float64 forwards of its
    piecewise-linear ops (32 MiB), as fast as torch's, read 47-62 %, and on an Ice Lake VM, whose caches held less,
    16-bit forwards (8 MiB) read 110-131 %. On the GPU every cell's tensors are far larger than its L2 cache: one
    floor, the run's largest tensor in float32 (a float16 copy_ ran at 2763 GB/s against 3034 GB/s for float32 on
    the H100, so a floor per dtype put 16-bit cells above 100 %)."""
    return numel * itemsize if device.type == "cpu" else 4 * largest_numel


SIZE_COPY_RATES = {}  # (bytes, graph) -> GB/s, the sweep's floor per size


def size_copy_gbps(nbytes, device, reps, graph=False):
    """The sweep's floor at one size: a float32 copy of nbytes, timed the same way as the op at that size (graph:
    see time_ms); measured once per (bytes, graph). Keyed by bytes, so a float32 and a bfloat16 cell of the same
    bytes share it."""
    key = (nbytes, graph)
    if key not in SIZE_COPY_RATES:
        src = torch.randn(max(1, nbytes // 4), device=device)
        dst = torch.empty_like(src)
        rate = gbps(2 * src.numel() * 4, time_ms(lambda: dst.copy_(src), device, reps, graph))
        del src, dst
        release(device)
        SIZE_COPY_RATES[key] = rate
        COPY_RECORDS.append({"kind": "copy", "scope": "size", "bytes": nbytes, "graph": graph, "gbps": rate})
        print(f"copy floor for {fmt_bytes(nbytes)}{' (CUDA graph)' if graph else ''}: {rate:.0f} GB/s", flush=True)
    return SIZE_COPY_RATES[key]


def apply_copy_floor(record, rate):
    """Sets the record's copy_gbps and every implementation's % of copy from rate."""
    record["copy_gbps"] = rate
    for impl in ("ours", "torch", "compile"):
        if f"{impl}_gbps" in record:
            value = record[f"{impl}_gbps"]
            record[f"{impl}_pct_copy"] = None if value is None else 100 * value / rate


def bytes_moved(saves, impl, direction, numel, itemsize):
    """The fewest bytes one pass must read and write. What the forward saves for the backward is the input or the
    output (no extra bytes) except for ops whose backward needs only the sign of a comparison (saves == "mask"):
    ours writes a 1-bit mask and reads it back instead of a full tensor. torch's rows (and torch.compile's, and
    KernelBench's expressions) are counted with a full saved tensor, the least torch's own op can do."""
    tensor = numel * itemsize
    mask = saves == "mask" and impl == "ours"
    saved = (numel + 7) // 8 if mask else tensor
    forward = 2 * tensor  # read x, write y (the timed forward runs without grad: no mask)
    backward = 2 * tensor + saved  # read grad and the saved tensor, write grad_in
    return {"forward": forward, "backward": backward, "step": forward + (saved if mask else 0) + backward}[direction]


def gbps(nbytes, ms):
    return None if ms is None else nbytes / ms / 1e6


# ---------------------------------------------------------------------------------------------------------------
# One cell: (row, dtype, size, direction) for every implementation


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
                # assert_close's lines (how many differ, the greatest differences and where) on one line: the
                # table prints an error's first line only.
                detail = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
                raise AssertionError(f"{what}: differs from torch in elements {start}..{end}: {detail}") from None


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

    The timed step's peak holds y and grad_in either way, and our mask too where the op saves one. Inside a
    network the gradient reaching the layer is a temporary that only autograd holds: here (fn(x) * 2).sum() and
    its backward, where our backward may write grad_in into that temporary while torch's allocates it. What the
    graph keeps is what the saved tensor costs a network whose next layer does not keep y: torch's ReLU keeps y
    (n elements), ours a mask (n/8 bytes); an op that keeps its input keeps a tensor that is alive anyway (0
    here)."""
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


def run_cell(record, row, impls, x, g, device, reps, copy_rate, graphs=False):
    """Checks ours (and torch.compile) against torch's op, then times each implementation; fills record. With
    graphs (the sweep), a CUDA forward of up to GRAPH_MAX_BYTES is timed through CUDA graphs (see time_ms) and as
    plain calls (the *_calls_ms numbers), in GRAPH_ROUNDS rounds that alternate the implementations, each keeping
    its best round. copy_rate: the floor for % of copy, None for the sweep's floor of this size."""
    direction = record["direction"]
    numel, itemsize = x.numel(), x.element_size()
    graph = graphs and device.type == "cuda" and direction == "forward" and numel * itemsize <= GRAPH_MAX_BYTES
    record["timing"] = "cuda graph" if graph else "calls"
    if copy_rate is None:
        copy_rate = size_copy_gbps(numel * itemsize, device, reps, graph)
    reference = make_pass(row.reference, x, g, direction)()

    def checked_pass(impl, fn):
        """fn's pass, checked against torch's op, the reference. A KernelBench expression (torch's side) is not
        checked: in 16-bit its intermediate roundings differ from the op's by more than the tolerance."""
        run = make_pass(fn, x, g, direction)
        if impl != "torch":
            check_close(run(), reference, f"{impl} {row.name} {record['dtype']} {direction}")
        return run

    def note_compile_error(impl, error):
        """torch.compile may fail on a given torch and device: a note, not the end of the run. Other errors raise."""
        if impl != "compile":
            raise error
        record["compile_error"] = error_text(error)

    best = {}  # impl -> [ms, plain-calls ms]
    if device.type == "cpu":
        # The CPU's cells take rounds too, and their samples in turn (best_of_rounds): one round of each side read
        # 0.47-1.10x for the same float32 ReLU forward from run to run (a slow spell of the memory).
        runs = {}
        for impl, fn in impls.items():
            try:
                runs[impl] = checked_pass(impl, fn)
            except Exception as error:
                note_compile_error(impl, error)
        best = {impl: [ms, None] for impl, ms in best_of_rounds(runs, device, reps, GRAPH_ROUNDS).items()}
        runs = None
    else:
        for round_ in range(GRAPH_ROUNDS if graph else 1):
            for impl, fn in impls.items() if round_ % 2 == 0 else reversed(impls.items()):
                if round_ and impl not in best:
                    continue  # it failed in the first round (torch.compile)
                try:
                    run = checked_pass(impl, fn) if round_ == 0 else make_pass(fn, x, g, direction)
                    times = [time_ms(run, device, reps, graph), time_ms(run, device, reps) if graph else None]
                    if round_ == 0 and direction == "step":
                        for what, nbytes in step_memory(fn, x, g, device).items():
                            record[f"{impl}_{what}_bytes"] = nbytes
                except Exception as error:
                    note_compile_error(impl, error)
                    continue
                finally:
                    run = None  # drops the backward's graph before the next implementation builds its own
                    release(device)
                if impl in best:  # a later round: keep the better of each time
                    times = [None if t is None else min(t, kept) for t, kept in zip(times, best[impl])]
                best[impl] = times
    for impl in impls:
        ms, calls_ms = best.get(impl, (None, None))
        nbytes = bytes_moved(row.saves, impl, direction, numel, itemsize)
        record.update({f"{impl}_ms": ms, f"{impl}_bytes": nbytes, f"{impl}_gbps": gbps(nbytes, ms)})
        if graph:
            record[f"{impl}_calls_ms"] = calls_ms
    apply_copy_floor(record, copy_rate)
    ours, theirs = record["ours_ms"], record["torch_ms"]
    record["speedup"] = theirs / ours if ours and theirs else None
    if graph:
        ours, theirs = record.get("ours_calls_ms"), record.get("torch_calls_ms")
        record["calls_speedup"] = theirs / ours if ours and theirs else None


def compiled(fn):
    """torch.compile(fn) on an empty dynamo cache, so one compiled function per (row, dtype) never meets the
    recompile limit. Most failures surface at the first call, where run_cell notes them."""
    try:
        torch._dynamo.reset()
        return torch.compile(lambda x: fn(x))  # a Python function: older dynamo cannot wrap a builtin itself
    except Exception as error:  # e.g. a Python version dynamo does not support

        def unavailable(x):
            raise RuntimeError(f"torch.compile: {error}")

        return unavailable


def run_cells(rows, dtypes, shapes, directions, device, reps, with_compile, floor=None, chunked=None):
    """Every cell, one progress line as each finishes; returns the records. With a CopyFloor (the main table), one
    copy round runs after each row and every cell's % of copy is set from its final floor at the end; without one
    (the sweep), cells are related to a copy of their own size and timed through CUDA graphs where run_cell says.
    chunked: a name of CHUNKED_LAYOUTS; each input is then chunked_input's, of the shape."""
    records = []
    total, done = len(rows) * len(dtypes) * len(shapes) * len(directions), 0
    largest_numel = max(map(math.prod, shapes))
    for row in rows:
        for dtype in dtypes:
            for shape in shapes:
                impls = {"torch": row.torch, "ours": row.ours}  # torch first: the rounds alternate from there
                if with_compile:
                    impls["compile"] = compiled(row.torch)
                if chunked:
                    x = chunked_input(CHUNKED_LAYOUTS[chunked], shape, device, dtype)
                else:
                    x = torch.randn(shape, device=device, dtype=dtype)
                # The incoming gradient is uniform in [-1, 1): a backward's rounding error scales with |g|, so with
                # |g| <= 1 the check's tolerance bounds the error of the derivative itself, as it bounds the
                # forward's. It is laid out as the forward's result is (rand_like: dense, in x's memory order), as
                # autograd hands it on.
                g = None
                if set(directions) != {"forward"}:
                    g = torch.rand_like(x).mul_(2).sub_(1)
                for direction in directions:
                    record = {"kind": "chunked" if chunked else "cell", "op": row.name, "params": row.params,
                              "dtype": dtype_name(dtype), "direction": direction, "numel": x.numel(),
                              "shape": list(x.shape)}
                    if chunked:
                        record["layout"] = chunked
                    try:
                        if floor is not None:
                            record["copy_bytes"] = floor_bytes(device, x.numel(), x.element_size(), largest_numel)
                        run_cell(record, row, impls, x, g, device, reps, floor and floor.rate(record["copy_bytes"]),
                                 graphs=floor is None)
                    except torch.cuda.OutOfMemoryError:
                        record["error"] = "out of memory"
                    except Exception as error:  # a mismatch or a failing kernel: reported, the run goes on
                        record["error"], record["failed"] = error_text(error), True
                    release(device)
                    records.append(record)
                    done += 1
                    print(f"[{done:>3}/{total}] {progress_line(record)}", flush=True)
                del x, g
                release(device)
        if floor is not None:
            floor.measure()
    if floor is not None:
        for record in records:
            if "copy_gbps" in record:
                apply_copy_floor(record, floor.rate(record["copy_bytes"]))
    return records


# ---------------------------------------------------------------------------------------------------------------
# Small-call overhead


def run_overhead(rows, device):
    """Wall-clock time per call at 1024 float32 elements, with and without requires_grad: here the dispatcher,
    autograd and launch costs are the whole cost. Best of a few rounds of many calls. The torch.ops column is
    torch's own op entered the way every custom operator is entered from Python: the floor for ours."""
    records = []
    for row in rows:
        for requires_grad in (False, True):
            x = torch.randn(OVERHEAD_NUMEL, device=device).requires_grad_(requires_grad)
            record = {"kind": "overhead", "op": row.name, "dtype": "float32", "numel": OVERHEAD_NUMEL}
            record["requires_grad"] = requires_grad
            for impl, fn in (("ours", row.ours), ("torch", row.torch), ("torch_ops", row.torch_op)):
                if fn is None:
                    record[f"{impl}_us"] = None
                    continue
                sample_ms(lambda: fn(x), device, OVERHEAD_CALLS // 10, 1, wall_clock=True)  # warm-up
                best = min(sample_ms(lambda: fn(x), device, OVERHEAD_CALLS, OVERHEAD_ROUNDS, wall_clock=True))
                record[f"{impl}_us"] = best * 1e3
            record["ratio"] = record["ours_us"] / record["torch_us"]
            records.append(record)
            print(
                f"overhead {row.name:<5} requires_grad={requires_grad!s:<5} ours {record['ours_us']:.2f} us, "
                f"torch {record['torch_us']:.2f} us, torch via torch.ops {fmt(record['torch_ops_us'], '.2f', ' us')}, "
                f"ours/torch {record['ratio']:.2f}",
                flush=True,
            )
    return records


# ---------------------------------------------------------------------------------------------------------------
# vmap (--vmap)

VMAP_SHAPE = {"cuda": (64, 2**16), "cpu": (64, 2**12)}
VMAP_TARGET = 1.2  # ours/torch under vmap: within this


@contextlib.contextmanager
def captured_fd2(into):
    """Points file descriptor 2 at the file `into` for the block: C++ warnings (TORCH_WARN) raised where no
    Python warning handler is installed, e.g. inside a call through torch.ops, are printed there directly."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(into.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def call_warnings(fn, x):
    """The warnings one call fn(x) raises: Python warnings, as errors (simplefilter("error"): the first one stops
    the call), and whatever C++ prints to stderr meanwhile (functorch's fallback warning for an operator without
    a vmap rule: "There is a performance drop because we have not yet implemented the batching rule ...")."""
    found = []
    torch._C._functorch._set_vmap_fallback_warning_enabled(True)
    with tempfile.TemporaryFile() as log, warnings.catch_warnings():
        warnings.simplefilter("error")
        with captured_fd2(log):
            try:
                fn(x)
            except Warning as warning:
                found.append(f"{type(warning).__name__}: {warning}")
        log.seek(0)
        # C++ prefixes a warning with "[W<date> <time> <file>:<line>] Warning: "; the message is what matters.
        lines = log.read().decode(errors="replace").splitlines()
        found += [line.split("] Warning: ", 1)[-1].strip() for line in lines if line.strip()]
    return found


def run_vmap(rows, device, reps):
    """torch.func.vmap(ours) against torch.func.vmap(torch's function) over a batch of rows, for every op row (the
    KernelBench expression rows time torch's composite, not an op of ours: left out)."""
    records = []
    x = torch.randn(VMAP_SHAPE[device.type], device=device)
    for row in (r for r in rows if not r.expression):
        record = {"kind": "vmap", "op": row.name, "params": row.params, "dtype": "float32", "shape": list(x.shape)}
        ours, theirs = torch.func.vmap(row.ours), torch.func.vmap(row.torch)
        try:
            record["warnings"] = call_warnings(ours, x)
            # Checked and timed with the fallback warning off: a fallback would print one line per call.
            torch._C._functorch._set_vmap_fallback_warning_enabled(False)
            check_close((ours(x),), (torch.func.vmap(row.reference)(x),), f"vmap {row.name}")
            best = best_of_rounds({"torch": lambda: theirs(x), "ours": lambda: ours(x)}, device, reps, GRAPH_ROUNDS)
            record.update({"ours_ms": best["ours"], "torch_ms": best["torch"], "ratio": best["ours"] / best["torch"]})
        except Exception as error:
            record["error"], record["failed"] = error_text(error), True
        finally:
            torch._C._functorch._set_vmap_fallback_warning_enabled(True)  # torch's default
        records.append(record)
        if "error" in record:
            line = record["error"]
        else:
            line = (f"ours {record['ours_ms'] * 1e3:.1f} us, torch {record['torch_ms'] * 1e3:.1f} us, "
                    f"ours/torch {record['ratio']:.2f}")
        found = record.get("warnings")
        warned = f"; {len(found)} warning(s): {found[0][:160]}" if found else ""
        print(f"vmap {row.name}: {line}{warned}", flush=True)
    return records


# ---------------------------------------------------------------------------------------------------------------
# KernelBench's timing (--kernelbench)

KERNELBENCH_TRIALS = 100  # KernelBench's num_perf_trials; --reps overrides
KERNELBENCH_WARMUP = 3
KERNELBENCH_ROUNDS = 5  # the trials of each model come in this many blocks, ours and the reference alternating
L2_FLUSH_SHAPE = (32, 1024, 1024)  # int64: 256 MB, KernelBench's clear_l2_cache (the H100's L2 is 50 MB)
CPU_KERNELBENCH_SHAPE = (64, 2**16)


def flush_l2(device):
    """KernelBench's clear_l2_cache: fill a 256 MB tensor, so that no line of the last call's data stays cached."""
    dummy = torch.empty(L2_FLUSH_SHAPE, dtype=torch.int64, device=device)
    dummy.fill_(42)
    del dummy


def kernelbench_trial(model, inputs, device):
    """One trial of KernelBench's time_execution_with_cuda_event: milliseconds of one call after an L2 flush,
    between two CUDA events (wall clock on the CPU), with the device idle before it."""
    synchronize(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush_l2(device)
        start.record()
        model(*inputs)
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)
    flush_l2(device)
    begin = time.perf_counter()
    model(*inputs)
    return (time.perf_counter() - begin) * 1e3


def kernelbench_times(models, inputs, device, trials):
    """{name: [ms, ...]}: `trials` KernelBench trials of each model, after KernelBench's warm-up, in
    KERNELBENCH_ROUNDS blocks that alternate the models (and their order), the first trial of each block dropped
    as KernelBench drops its first."""
    for model in models.values():
        for _ in range(KERNELBENCH_WARMUP):
            model(*inputs)
            synchronize(device)
    release(device)  # KernelBench empties the allocator's cache after its warm-up
    rounds = min(KERNELBENCH_ROUNDS, trials)
    times = {name: [] for name in models}
    for round_ in range(rounds):
        count = trials // rounds + (round_ < trials % rounds)
        for name in list(models) if round_ % 2 == 0 else list(models)[::-1]:
            block = [kernelbench_trial(models[name], inputs, device) for _ in range(count + 1)]
            times[name] += block[1:]
    return times


def no_grad_call(model, inputs):
    """model(*inputs) under no_grad: the main table's forward."""

    def call():
        with torch.no_grad():
            return model(*inputs)

    return call


def kernelbench_problems(ops=None):
    """Every KernelBench problem (activations.PROBLEMS), or those of the ops named (each row's .kernelbench)."""
    if not ops:
        return list(activations.PROBLEMS)
    wanted = {activations.OPS[op].kernelbench.problem for op in ops if activations.OPS[op].kernelbench}
    return [problem for problem in activations.PROBLEMS if problem in wanted]


def run_kernelbench(problems, device, trials, reps):
    """The problems under KernelBench's timing, and under bench.py's (the main table's forward: `reps`
    back-to-back samples under no_grad, no flush)."""
    records = []
    for problem in problems:
        harness = activations.kernelbench(problem)
        record = {"kind": "kernelbench", "problem": problem, "trials": trials}
        try:
            init_inputs = harness.get_init_inputs()
            models = {"ours": harness.ModelNew(*init_inputs), "torch": harness.Model(*init_inputs)}
            models = {name: model.to(device) for name, model in models.items()}
            torch.manual_seed(0)
            if device.type == "cuda":
                with device:  # the problem's own get_inputs(), drawn on the GPU: seconds of host time saved
                    inputs = [t.to(device) for t in harness.get_inputs()]
            else:
                inputs = [torch.randn(CPU_KERNELBENCH_SHAPE)]
            record.update({"shape": list(inputs[0].shape), "dtype": dtype_name(inputs[0].dtype)})
            with torch.no_grad():
                check_close((models["ours"](*inputs),), (models["torch"](*inputs),), f"kernelbench {problem}")
            release(device)
            times = kernelbench_times(models, inputs, device, trials)
            for name, samples in times.items():
                record[f"{name}_mean_ms"] = statistics.fmean(samples)
                record[f"{name}_median_ms"] = statistics.median(samples)
                record[f"{name}_min_ms"] = min(samples)
            record["speedup_mean"] = record["torch_mean_ms"] / record["ours_mean_ms"]  # KernelBench's speedup
            record["speedup_median"] = record["torch_median_ms"] / record["ours_median_ms"]
            for name, model in models.items():
                record[f"bench_{name}_ms"] = time_ms(no_grad_call(model, inputs), device, reps)
            record["bench_speedup"] = record["bench_torch_ms"] / record["bench_ours_ms"]
        except torch.cuda.OutOfMemoryError:
            record["error"] = "out of memory"
        except Exception as error:
            record["error"], record["failed"] = error_text(error), True
        finally:
            models = inputs = None
            release(device)
        records.append(record)
        if "error" in record:
            print(f"kernelbench {problem}: {record['error']}", flush=True)
        else:
            print(
                f"kernelbench {problem}: mean ours {record['ours_mean_ms']:.4f} ms, reference "
                f"{record['torch_mean_ms']:.4f} ms, speedup {record['speedup_mean']:.3f}x (median "
                f"{record['speedup_median']:.3f}x); bench.py's method {record['bench_speedup']:.3f}x",
                flush=True,
            )
    return records


# ---------------------------------------------------------------------------------------------------------------
# Training steps of small networks (--models)

# op -> torch's module, at its defaults; activations.swap_activations replaces it with ours.
TORCH_MODULES = {
    "relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "elu": nn.ELU, "selu": nn.SELU, "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh, "silu": nn.SiLU, "gelu": nn.GELU, "hardsigmoid": nn.Hardsigmoid, "softplus": nn.Softplus,
    "softsign": nn.Softsign, "hardtanh": nn.Hardtanh, "relu6": nn.ReLU6, "mish": nn.Mish,
}
CONV_ACTIVATIONS = ("relu", "leaky_relu", "elu", "selu", "silu", "gelu", "mish")
MODEL_ACTIVATIONS = {"mlp": CONV_ACTIVATIONS, "cnn": CONV_ACTIVATIONS, "transformer": ("gelu", "silu")}
# The input of each model: (batch, features) for mlp and transformer (d = features), NCHW for cnn. On the CPU
# everything is scaled down so that a step takes milliseconds.
MODEL_SHAPES = {
    "cuda": {"mlp": (8192, 4096), "cnn": (64, 64, 64, 64), "transformer": (8192, 1024)},
    "cpu": {"mlp": (256, 256), "cnn": (8, 16, 16, 16), "transformer": (256, 64)},
}
CNN_LAYERS = 4
MODEL_MODES = ("eager", "compiled", "compiled-ours")
MODEL_SAMPLES, MODEL_ROUNDS = 20, 5  # each round the median of MODEL_SAMPLES steps
MODEL_PROFILED_STEPS = 10  # steps whose kernels torch.profiler sums (the GPU's time per step)
MODEL_TOLERANCE = 2e-2  # relative error of the two models' bfloat16 outputs


def build_model(kind, activation, shape):
    """The model `kind` with torch's activation module `activation`, for inputs of `shape`."""
    width = shape[1]
    if kind == "mlp":
        return nn.Sequential(nn.Linear(width, width), activation(), nn.Linear(width, width))
    if kind == "transformer":  # a transformer's MLP block
        return nn.Sequential(nn.Linear(width, 4 * width), activation(), nn.Linear(4 * width, width))
    layers = []
    for _ in range(CNN_LAYERS):
        layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), activation()]
    return nn.Sequential(*layers).to(memory_format=torch.channels_last)


def training_step(model, x, device):
    """One training step of model on x: forward and loss under bfloat16 autocast, backward, SGD, zero_grad."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def gpu_ms_per_step(step):
    """The time the GPU spends in kernels (and copies) per training step, summed by torch.profiler over
    MODEL_PROFILED_STEPS steps. The CNN's step at bench.py's size launches 1.7-2.6 ms of kernels and takes 2.9-4.7 ms
    of wall clock: the host (Python, launches) sets its pace, and one model's rounds moved between 3.5 and 6.4 ms
    for reasons that have nothing to do with the activation. What the activation changes shows here."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(MODEL_PROFILED_STEPS):
            step()
        torch.cuda.synchronize()
    device_events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time_total for e in device_events) / MODEL_PROFILED_STEPS / 1000


def relative_error(ours, theirs, x, device):
    """||ours(x) - theirs(x)|| / ||theirs(x)|| of the two models' outputs under the autocast of the step."""
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        a, b = ours(x).float(), theirs(x).float()
    return ((a - b).norm() / b.norm()).item()


def run_models(device, modes, ops=None):
    """Each model with each of its activations (those in activations.OPS and ops): torch's modules against a deep
    copy with ours swapped in, in each mode, torch's and ours alternating in MODEL_ROUNDS rounds."""
    records = []
    fuse_as_set = activations.FUSE_UNDER_COMPILE  # each mode sets the flag; the user's value comes back after it
    for kind, names in MODEL_ACTIVATIONS.items():
        shape = MODEL_SHAPES[device.type][kind]
        for name in (n for n in names if n in activations.OPS and (not ops or n in ops)):
            torch.manual_seed(0)
            theirs = build_model(kind, TORCH_MODULES[name], shape).to(device)
            ours = copy.deepcopy(theirs)
            swapped = activations.swap_activations(ours)
            x = torch.randn(shape, device=device)
            if kind == "cnn":
                x = x.to(memory_format=torch.channels_last)
            for mode in modes:
                record = {"kind": "model", "model": kind, "activation": name, "mode": mode, "shape": list(shape)}
                try:
                    if not swapped:
                        raise RuntimeError(f"activations.swap_activations replaced no module of {kind} with {name}")
                    if mode == "eager":  # the same weights still: the outputs must agree
                        record["rel_error"] = relative_error(ours, theirs, x, device)
                        if not record["rel_error"] <= MODEL_TOLERANCE:
                            raise AssertionError(f"outputs differ: relative error {record['rel_error']:.3g}")
                    models = {"torch": theirs, "ours": ours}
                    if mode != "eager":
                        torch._dynamo.reset()  # a fresh cache for each pair (the recompile limit)
                        models = {impl: torch.compile(model) for impl, model in models.items()}
                    # "compiled": ours hand torch's functions to inductor, which fuses them (FUSE_UNDER_COMPILE);
                    # "compiled-ours": our operators stay in the compiled graph, kernels of their own.
                    activations.FUSE_UNDER_COMPILE = mode != "compiled-ours"
                    steps = {impl: training_step(model, x, device) for impl, model in models.items()}
                    best = best_of_rounds(steps, device, MODEL_SAMPLES, MODEL_ROUNDS)
                    record.update({"torch_ms": best["torch"], "ours_ms": best["ours"]})
                    record["ratio"] = best["ours"] / best["torch"]
                    if device.type == "cuda":
                        gpu = {impl: gpu_ms_per_step(step) for impl, step in steps.items()}
                        record.update({"torch_gpu_ms": gpu["torch"], "ours_gpu_ms": gpu["ours"],
                                       "gpu_ratio": gpu["ours"] / gpu["torch"]})
                except torch.cuda.OutOfMemoryError:
                    record["error"] = "out of memory"
                except Exception as error:
                    record["error"] = error_text(error)
                    record["failed"] = mode == "eager"  # a torch.compile failure is a note, as in the main table
                finally:
                    activations.FUSE_UNDER_COMPILE = fuse_as_set
                    models = steps = None
                    release(device)
                records.append(record)
                what = record["error"] if "error" in record else (
                    f"torch {record['torch_ms']:.3f} ms, ours {record['ours_ms']:.3f} ms, "
                    f"ours/torch {record['ratio']:.3f}" + (f"; GPU ours/torch {record['gpu_ratio']:.3f}"
                                                            if "gpu_ratio" in record else ""))
                print(f"model {kind} {name} {mode}: {what}", flush=True)
            del theirs, ours, x
            release(device)
    return records


# ---------------------------------------------------------------------------------------------------------------
# DDP training steps (--ddp)

DDP_ACTIVATIONS = ("relu", "gelu", "silu")
DDP_ROUNDS, DDP_STEPS = 5, 10


def ddp_rank(rank, world_size, port, names, results_path):
    """One process of --ddp: GPU `rank`, NCCL; times the MLP's DDP step with torch's modules and with ours. Every
    rank runs the same steps in the same order (each step all-reduces the gradients); rank 0 writes the records."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    device = torch.device("cuda", rank)
    shape = MODEL_SHAPES["cuda"]["mlp"]
    records = []
    try:
        for name in names:
            torch.manual_seed(0)
            theirs = build_model("mlp", TORCH_MODULES[name], shape).to(device)
            ours = copy.deepcopy(theirs)
            activations.swap_activations(ours)
            x = torch.randn(shape, device=device)
            steps = {impl: training_step(nn.parallel.DistributedDataParallel(model, device_ids=[rank]), x, device)
                     for impl, model in (("torch", theirs), ("ours", ours))}
            best = {impl: float("inf") for impl in steps}
            for round_ in range(DDP_ROUNDS + 1):  # round 0 warms up
                for impl in (("torch", "ours") if round_ % 2 else ("ours", "torch")):
                    torch.cuda.synchronize(device)
                    start = time.perf_counter()
                    for _ in range(DDP_STEPS):
                        steps[impl]()
                    torch.cuda.synchronize(device)
                    if round_:
                        best[impl] = min(best[impl], (time.perf_counter() - start) * 1000 / DDP_STEPS)
            records.append({"kind": "ddp", "model": "mlp", "activation": name, "shape": list(shape),
                            "world_size": world_size, "torch_ms": best["torch"], "ours_ms": best["ours"],
                            "ratio": best["ours"] / best["torch"]})
            del steps, theirs, ours, x
            release(device)
        if rank == 0:
            torch.save(records, results_path)
    finally:
        dist.destroy_process_group()


def run_ddp(ops=None):
    """--ddp over every GPU here, one process each (torch.multiprocessing.spawn); returns rank 0's records."""
    import socket

    world_size = torch.cuda.device_count()
    if world_size < 2:
        return [{"kind": "ddp", "model": "mlp", "error": f"--ddp needs two or more GPUs; {world_size} here",
                 "failed": True}]
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    names = [n for n in DDP_ACTIVATIONS if not ops or n in ops]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ddp.pt")
        torch.multiprocessing.spawn(ddp_rank, args=(world_size, port, names, path), nprocs=world_size)
        records = torch.load(path)
    for r in records:
        print(f"ddp mlp {r['activation']} x {r['world_size']} GPUs: torch {r['torch_ms']:.3f} ms, ours "
              f"{r['ours_ms']:.3f} ms, ours/torch {r['ratio']:.3f}", flush=True)
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
    headers += ["torch/ours", "ours GB/s", "ours % copy", "torch % copy"]
    floors = {r.get("copy_gbps") for r in records if "copy_gbps" in r}
    per_size = len(floors) > 1
    headers += ["copy GB/s"] if per_size else []
    graphs = any(r.get("timing") == "cuda graph" for r in records)
    headers += ["timing", "plain calls torch/ours"] if graphs else []
    rows = []
    for r in records:
        row = [r["op"], r["dtype"], r["direction"]] + ([fmt_size(r["numel"])] if sized else [])
        row += [fmt(r.get(f"{impl}_ms"), ".4f" if graphs else ".3f") for impl in impls]
        row += [fmt(r.get("speedup"), ".2f", "x"), fmt(r.get("ours_gbps"), ".0f"), fmt(r.get("ours_pct_copy"), ".1f")]
        row += [fmt(r.get("torch_pct_copy"), ".1f")] + ([fmt(r.get("copy_gbps"), ".0f")] if per_size else [])
        row += [r.get("timing", ""), fmt(r.get("calls_speedup"), ".2f", "x")] if graphs else []
        rows.append(row)
    if len(floors) == 1:
        title += f"; % copy of the run's copy floor, {fmt(floors.pop(), '.0f')} GB/s"
    elif any("copy_bytes" in r for r in records):
        title += "; % copy of a float32 copy of the cell's tensor bytes (its rate: copy GB/s)"
    print_table(title, headers, rows)
    if graphs:
        print(
            "  timing 'cuda graph': the calls of a sample replayed from one CUDA graph, the kernels' own time; "
            "'plain calls torch/ours' times the same calls from Python, launch gaps included (the host side of a "
            "call outlasts its kernel there; --overhead measures it)."
        )
    for r in records:
        if "compile_error" in r or "error" in r:
            label = "FAILED" if r.get("failed") else "note"
            print(f"  {label}: {r['op']} {r['dtype']} {r['direction']}: {r.get('error') or r['compile_error']}")


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
        [r["op"], str(r["requires_grad"]), f"{r['ours_us']:.2f}", f"{r['torch_us']:.2f}",
         fmt(r["torch_ops_us"], ".2f"), f"{r['ratio']:.2f}"]
        for r in records
    ]
    title = f"Time per call at {OVERHEAD_NUMEL} float32 elements (wall clock, best of {OVERHEAD_ROUNDS} rounds)"
    print_table(title, ["op", "requires_grad", "ours us", "torch us", "torch via torch.ops us", "ours/torch"], rows)


def print_vmap(records):
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["op"], "n/a", "n/a", "n/a", "FAILED", str(len(r.get("warnings", [])))])
            continue
        within = "yes" if r["ratio"] <= VMAP_TARGET else "NO"
        rows.append([r["op"], f"{r['ours_ms'] * 1e3:.1f}", f"{r['torch_ms'] * 1e3:.1f}", f"{r['ratio']:.2f}", within,
                     str(len(r["warnings"]))])
    shape = " x ".join(map(str, records[0]["shape"])) if records else ""
    title = (f"torch.func.vmap over {shape} float32: time per call (medians of samples, CUDA events on the GPU, "
             f"short calls batched; best of {GRAPH_ROUNDS} alternating rounds)")
    print_table(title, ["op", "ours us", "torch us", "ours/torch", f"within {VMAP_TARGET}x", "warnings"], rows)
    for r in records:
        for text in ([r["error"]] if "error" in r else []) + r.get("warnings", [])[:1]:
            print(f"  {r['op']}: {text[:300]}")


def print_kernelbench(records):
    headers = ["problem", "ours mean", "ours median", "ours min", "ref mean", "ref median", "ref min",
               "ref/ours mean", "ref/ours median", "bench.py ours", "bench.py ref", "bench.py ref/ours"]
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["problem"]] + ["n/a"] * (len(headers) - 1))
            continue
        row = [r["problem"]]
        row += [f"{r[f'{who}_{stat}_ms']:.4f}" for who in ("ours", "torch") for stat in ("mean", "median", "min")]
        row += [f"{r['speedup_mean']:.3f}x", f"{r['speedup_median']:.3f}x"]
        row += [f"{r['bench_ours_ms']:.4f}", f"{r['bench_torch_ms']:.4f}", f"{r['bench_speedup']:.3f}x"]
        rows.append(row)
    done = [r for r in records if "error" not in r]
    what = f"{' x '.join(map(str, done[0]['shape']))} {done[0]['dtype']}, " if done else ""
    print_table(
        f"KernelBench's timing ({what}{records[0]['trials'] if records else 0} trials each: L2 flushed by a 256 MB "
        "fill, one call between two CUDA events (wall clock on the CPU), synchronized; mean is KernelBench's score) "
        "against bench.py's (medians of back-to-back calls under no_grad), ms",
        headers,
        rows,
    )
    for r in records:
        if "error" in r:
            print(f"  {r['problem']}: {r['error']}")


def print_models(records):
    headers = ["model", "activation", "mode", "torch ms", "ours ms", "ours/torch", "torch GPU ms", "ours GPU ms",
               "GPU ours/torch", "rel. error"]
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["model"], r["activation"], r["mode"], "n/a", "n/a", "FAILED" if r.get("failed") else "n/a",
                         "n/a", "n/a", "n/a", fmt(r.get("rel_error"), ".1e")])
            continue
        rows.append([r["model"], r["activation"], r["mode"], f"{r['torch_ms']:.3f}", f"{r['ours_ms']:.3f}",
                     f"{r['ratio']:.3f}", fmt(r.get("torch_gpu_ms"), ".3f"), fmt(r.get("ours_gpu_ms"), ".3f"),
                     fmt(r.get("gpu_ratio"), ".3f"), fmt(r.get("rel_error"), ".1e")])
    shapes = {r["model"]: " x ".join(map(str, r["shape"])) for r in records}
    print_table(
        "One training step (bfloat16 autocast, backward, SGD, zero_grad), torch's modules against ours swapped in; "
        f"wall clock: best of {MODEL_ROUNDS} alternating rounds of the median of {MODEL_SAMPLES} steps; GPU: the "
        f"kernels' time per step (torch.profiler, {MODEL_PROFILED_STEPS} steps). compiled: ours hand torch's functions "
        "to inductor (FUSE_UNDER_COMPILE); compiled-ours: our operators kept. Inputs: "
        + ", ".join(f"{kind} {shape}" for kind, shape in shapes.items()),
        headers,
        rows,
    )
    for r in records:
        if "error" in r:
            print(f"  {r['model']} {r['activation']} {r['mode']}: {r['error']}")


def plot(records, path):
    """One figure of GB/s. The sweep's records: a panel per (op, dtype), GB/s against size, a line per implementation
    and direction, and the copy rate at each size. --softmax's records (rows over the last dim): a panel per
    (op, dtype), GB/s against row length at the table's shapes, and the run's copy floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [r for r in records if "error" not in r and not r.get("failed")]
    sweep = [r for r in cells if r.get("kind") != "softmax"]
    rows = [r for r in cells if r.get("kind") == "softmax" and r["dim"] == -1]
    panels = [("sweep", key) for key in dict.fromkeys((r["op"], r["dtype"]) for r in sweep)]
    panels += [("softmax", key) for key in dict.fromkeys((r["op"], r["dtype"]) for r in rows)]
    columns = max(len(dict.fromkeys(dtype for _, (_, dtype) in panels)), 1)
    grid_rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(6 * columns, 4 * grid_rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (kind, (op, dtype)) in zip(axes.flat, panels):
        if kind == "sweep":
            panel = [r for r in sweep if (r["op"], r["dtype"]) == (op, dtype)]
            size_of, xlabel, title = (lambda r: r["numel"]), "elements", f"{op} {dtype}"
            copies = sorted({(r["numel"], r["copy_gbps"]) for r in panel})
        else:
            panel = [r for r in rows if (r["op"], r["dtype"]) == (op, dtype)]
            size_of, xlabel = (lambda r: r["shape"][-1]), "row length (elements)"
            title = f"{op} {dtype}, rows over the last dim"
            copies = sorted({(size_of(r), r["floor_gbps"]) for r in panel})
        panel.sort(key=size_of)
        directions = list(dict.fromkeys(r["direction"] for r in panel))
        for direction in directions:
            lines = [r for r in panel if r["direction"] == direction]
            for impl, marker in zip(impls_of(lines), "os^"):
                label = impl if len(directions) == 1 else f"{impl} {direction}"
                rates = [math.nan if r.get(f"{impl}_gbps") is None else r[f"{impl}_gbps"] for r in lines]
                ax.plot([size_of(r) for r in lines], rates, marker=marker, label=label)
        ax.plot([n for n, _ in copies], [c for _, c in copies], "k--", label="copy (read + write)")
        ax.set_xscale("log", base=2)
        ax.set(title=title, xlabel=xlabel, ylabel="GB/s")
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
    if not items:  # an empty list would select nothing (and read as no selection at all)
        raise argparse.ArgumentTypeError(f"an empty list; choose from {', '.join(choices)}")
    return items


def check_output_path(parser, option, path):
    """A path the run will write: refused at the start, not after the run, when it cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        parser.error(f"{option} {path}: is a directory")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        parser.error(f"{option} {path}: cannot write into {folder}")


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
    parser.add_argument("--vmap", action="store_true", help="torch.func.vmap of every op, ours against torch's")
    parser.add_argument("--kernelbench", action="store_true", help="KernelBench's problems, timed as KernelBench does")
    parser.add_argument("--softmax", action="store_true", help="softmax and log_softmax over the issue's shapes")
    parser.add_argument("--chunked", action="store_true",
                        help="relu, silu, gelu on half of a tensor (x.chunk(2, -1) of gated MLPs, "
                        "x.chunk(2, 1) of a channels_last map)")
    parser.add_argument(
        "--models",
        type=lambda t: parse_list(t, MODEL_MODES),
        nargs="?",
        const=[],
        metavar="MODES",
        help="training steps of an MLP, a CNN and a transformer MLP block; MODES: eager,compiled,compiled-ours "
        "(default: all on the GPU, eager on the CPU)",
    )
    parser.add_argument("--ddp", action="store_true",
                        help="a DDP training step of the MLP over every GPU here (NCCL), torch's modules against ours")
    parser.add_argument("--main", action="store_true", help="the main run too, beside the sections named")
    parser.add_argument(
        "--build",
        type=int,
        nargs="?",
        const=3,
        metavar="RUNS",
        help="only time a cold build and a cached import in new processes, RUNS times (default 3)",
    )
    parser.add_argument("--ops", type=lambda t: parse_list(t, list(activations.OPS)), help="e.g. relu,gelu")
    parser.add_argument("--dtypes", type=lambda t: parse_list(t, list(DTYPES), DTYPE_ALIASES), help="e.g. bf16,fp16")
    parser.add_argument("--directions", type=lambda t: parse_list(t, DIRECTIONS), help="forward,backward,step")
    parser.add_argument("--sizes", type=parse_sizes, help="element counts, e.g. 1024,1048576 or 2^20")
    parser.add_argument(
        "--reps",
        type=int,
        help=f"timed samples per measurement (default {DEFAULT_REPS}), and trials per model in --kernelbench "
        f"(default {KERNELBENCH_TRIALS})",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="the main table's torch.compile column (default: on the GPU, not in --sweep); --models has its own "
        "MODES",
    )
    parser.add_argument("--json", metavar="PATH", help="write every number to PATH")
    parser.add_argument("--plot", metavar="PATH",
                        help="PNG of the sweep's GB/s against size (implies --sweep); with --softmax, softmax "
                        "panels too")
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.build is not None and args.build < 1:
        parser.error("--build RUNS must be at least 1")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed")
    for option in ("json", "plot"):
        if getattr(args, option):
            check_output_path(parser, f"--{option}", getattr(args, option))
    # Selections that leave a section named on the command line with nothing to time.
    if args.softmax and args.directions and not {"forward", "backward"} & set(args.directions):
        parser.error("--softmax times forward and backward; --directions names neither")
    model_ops = {name for names in MODEL_ACTIVATIONS.values() for name in names}
    if args.models is not None and args.ops and not model_ops & set(args.ops):
        parser.error(f"--models has no model with {', '.join(args.ops)}; its activations: {', '.join(sorted(model_ops))}")
    args.sweep = args.sweep or bool(args.plot)
    return args


def sections_of(args):
    """The sections this run runs, in order: those named, and the main run (table, overhead, vmap) when none is
    named or with --main."""
    named = [name for name in ("sweep", "overhead", "vmap", "kernelbench", "softmax", "chunked") if getattr(args, name)]
    named += ["models"] if args.models is not None else []
    named += ["ddp"] if args.ddp else []
    sections = ["table", "overhead", "vmap"] if args.main or not named else []
    return sections + [name for name in named if name not in sections]


def cell_plan(args, on_gpu, sweep):
    """(dtypes, shapes, directions, with_compile) of the table's or the sweep's cells: the defaults, narrowed by
    the options."""
    if sweep:
        dtypes, directions = ["float32", "bfloat16"], ["forward"]
        shapes = [(n,) for n in (GPU_SWEEP if on_gpu else CPU_SWEEP)]
    else:
        dtypes = ["float32", "bfloat16", "float16"] if on_gpu else ["float32", "bfloat16", "float16", "float64"]
        directions = list(DIRECTIONS)
        shapes = [KERNELBENCH_SHAPE if on_gpu else (CPU_NUMEL,)]
    dtypes = [DTYPES[d] for d in args.dtypes or dtypes]
    shapes = [(n,) for n in args.sizes] if args.sizes else shapes
    # torch.compile builds for minutes on a small CPU, and the sweep compares ours with torch and the copy alone.
    with_compile = args.compile if args.compile is not None else on_gpu and not sweep
    return dtypes, shapes, args.directions or directions, with_compile


def size_text(shapes):
    if len(shapes) == 1:
        return " x ".join(map(str, shapes[0]))
    return f"{fmt_size(min(map(math.prod, shapes)))} to {fmt_size(max(map(math.prod, shapes)))}"


def run_table(args, rows, device, name, reps, sweep):
    """The main table (with the run's copy floor, its memory table) or the sweep; prints it, returns the cells."""
    dtypes, shapes, directions, with_compile = cell_plan(args, device.type == "cuda", sweep)
    floor = None
    if not sweep:
        largest = max(map(math.prod, shapes))
        sizes = [floor_bytes(device, math.prod(shape), dtype.itemsize, largest) for shape in shapes for dtype in dtypes]
        floor = CopyFloor(sizes, device, reps)
        floor.measure()
        print(f"copy floor: {floor.describe()}", flush=True)
    cells = run_cells(rows, dtypes, shapes, directions, device, reps, with_compile, floor)
    if floor is not None:
        print(f"copy floor of this run: {floor.describe(rounds=True)}", flush=True)
    print_cells(cells, f"{'Sweep' if sweep else 'Benchmark'} on {name}: {size_text(shapes)} elements, {reps} samples")
    print_memory(cells)
    if not sweep and device.type == "cpu":
        cells += run_control(dtypes, max(shapes, key=math.prod), device, reps)
    return cells


# --chunked: the activations of gated MLPs (SwiGLU, GeGLU, ReGLU) and of CNNs on the first half of x.chunk(2, dim) of
# a whole tensor x.
@dataclasses.dataclass(frozen=True)
class ChunkedLayout:
    dim: int  # the dim that x.chunk(2, dim) splits
    memory_format: torch.memory_format  # the whole tensor's
    shapes: dict  # the half's shape by device type
    text: str  # how the tables name it


CHUNKED_OPS = ("relu", "silu", "gelu")
CHUNKED_LAYOUTS = {
    # rows x the half's length: the gate half of a fused gate-and-up projection
    "rows": ChunkedLayout(-1, torch.contiguous_format, {"cuda": (16384, 16384), "cpu": (2048, 2048)},
                          "x.chunk(2, -1)"),
    # N x C x H x W of a channels_last map: rows of C elements 2C apart in memory
    "channels": ChunkedLayout(1, torch.channels_last, {"cuda": (64, 256, 128, 128), "cpu": (16, 64, 64, 64)},
                              "x.chunk(2, 1) of a channels_last x"),
}


def chunked_whole_shape(layout, shape):
    """The shape of the tensor whose first half along layout.dim has the given shape."""
    whole = list(shape)
    whole[layout.dim] *= 2
    return whole


def chunked_input(layout, shape, device, dtype):
    """The first half of x.chunk(2, layout.dim) of a random x in the layout's memory format."""
    whole = torch.randn(chunked_whole_shape(layout, shape), device=device, dtype=dtype)
    return whole.contiguous(memory_format=layout.memory_format).chunk(2, layout.dim)[0]


def run_chunked(args, device, name, reps):
    """--chunked: relu, silu and gelu on half of a tensor in each of CHUNKED_LAYOUTS (see the module docstring);
    prints a table a layout, returns the cells' records."""
    rows = table_rows(args.ops or CHUNKED_OPS)
    dtypes = [DTYPES[d] for d in args.dtypes or ["float32", "bfloat16"]]
    numels = {math.prod(layout.shapes[device.type]) for layout in CHUNKED_LAYOUTS.values()}
    sizes = [floor_bytes(device, numel, dtype.itemsize, max(numels)) for dtype in dtypes for numel in numels]
    floor = CopyFloor(sizes, device, reps)
    floor.measure()
    print(f"copy floor: {floor.describe()}", flush=True)
    cells = []
    for layout_name, layout in CHUNKED_LAYOUTS.items():
        shape = layout.shapes[device.type]
        layout_cells = run_cells(rows, dtypes, [shape], args.directions or list(DIRECTIONS), device, reps, False,
                                 floor, chunked=layout_name)
        whole = chunked_whole_shape(layout, shape)
        print_cells(layout_cells, f"Chunked input on {name}: the first half of {layout.text}, "
                    f"{' x '.join(map(str, shape))} elements of a {' x '.join(map(str, whole))} tensor, {reps} samples")
        cells += layout_cells
    return cells


# torch's forwards timed against themselves on the CPU (run_control): memory-bound ones, where a cell's ratio is
# most exposed to the machine's memory rate, and two with an exponential.
CONTROL_OPS = ("relu", "hardtanh", "sigmoid", "silu")


def run_control(dtypes, shape, device, reps):
    """The CPU table's A/A control: torch's forward against itself, each timed as a cell is (best_of_rounds), in
    every dtype of the run. Its spread is how far from 1.0x a cell's ratio can read without any difference in
    speed; a cell inside it is not measurably slower or faster."""
    records = []
    rows = [row for row in table_rows(CONTROL_OPS) if not row.expression]
    for row in rows:
        for dtype in dtypes:
            x = torch.randn(shape, device=device, dtype=dtype)
            twins = {twin: make_pass(row.torch, x, None, "forward") for twin in ("torch", "twin")}
            best = best_of_rounds(twins, device, reps, GRAPH_ROUNDS)
            records.append({"kind": "control", "op": row.name, "dtype": dtype_name(dtype), "direction": "forward",
                            "numel": x.numel(), "torch_ms": best["torch"], "twin_ms": best["twin"],
                            "ratio": best["torch"] / best["twin"]})
    ratios = sorted(r["ratio"] for r in records)
    print(f"A/A control, torch's forward against itself timed as a cell ({', '.join(CONTROL_OPS)}; "
          f"{len(ratios)} cells): {ratios[0]:.2f}-{ratios[-1]:.2f}x, median {statistics.median(ratios):.2f}x",
          flush=True)
    return records


# ---------------------------------------------------------------------------------------------------------------
# Softmax and log_softmax

# (shape, dim): the issue's row lengths over the last dim, and a reduction over a middle dim.
SOFTMAX_SHAPES = [((262144, 1024), -1), ((65536, 4096), -1), ((8192, 32768), -1), ((8192, 50257), -1),
                  ((4096, 131072), -1), ((4096, 393216), -1), ((64, 4194304), -1), ((1024, 1024, 1024), 1)]
SOFTMAX_CPU_SHAPES = [((4096, 1024), -1), ((64, 50257), -1), ((64, 256, 64), 1)]


def liger_softmax():
    """Liger-Kernel's Triton softmax (`LigerSoftmaxFunction`, last dim only), the kernel users pick for softmax
    today, when `liger_kernel` is importable; else None, and the --softmax table has no Liger column."""
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except ImportError:
        return None
    return LigerSoftmaxFunction.apply


def liger_call(liger, x, g, direction):
    """Liger's softmax of x in `direction` as a call to time; called once here, so that a row it refuses raises now.
    Its backward runs through autograd.grad: it has no public backward alone."""
    if direction == "forward":
        liger(x)
        return functools.partial(liger, x)
    x_liger = x.detach().requires_grad_()
    with torch.enable_grad():
        y_liger = liger(x_liger)
    return lambda: torch.autograd.grad(y_liger, x_liger, g, retain_graph=True)[0]


def run_softmax(args, device, reps):
    """The --softmax table: one record per (op, shape, dtype, direction)."""
    on_gpu = device.type == "cuda"
    dtypes = [DTYPES[d] for d in args.dtypes or ["float32", "bfloat16"]]
    directions = [d for d in (args.directions or ["forward", "backward"]) if d in ("forward", "backward")]
    with_compile = args.compile if args.compile is not None else on_gpu
    shapes = SOFTMAX_SHAPES if on_gpu else SOFTMAX_CPU_SHAPES
    largest = max(math.prod(shape) for shape, _ in shapes)
    floor = CopyFloor([floor_bytes(device, math.prod(shape), dtype.itemsize, largest)
                       for shape, _ in shapes for dtype in dtypes], device, reps)
    floor.measure()
    print(f"copy floor: {floor.describe()}", flush=True)
    aten_backward = {"softmax": torch.ops.aten._softmax_backward_data.default,
                     "log_softmax": torch.ops.aten._log_softmax_backward_data.default}
    liger = liger_softmax() if on_gpu else None
    if liger is not None:
        print("Liger-Kernel's softmax found: a liger column for softmax over the last dim", flush=True)
    records = []
    for name, row in activations.REDUCTIONS.items():
        ours_forward = getattr(activations, name)
        ours_backward = getattr(torch.ops.activations, name + "_backward").default
        for shape, dim in shapes:
            for dtype in dtypes:
                x = torch.randn(shape, device=device, dtype=dtype)
                with torch.no_grad():
                    y = row.torch_function(x, dim)
                g = torch.randn_like(x)
                # torch.compile builds for seconds per cell: by default only at KernelBench's shape.
                compile_here = with_compile and (args.compile or shape == KERNELBENCH_SHAPE)
                liger_here = liger is not None and name == "softmax" and dim == -1
                for direction in directions:
                    record = {"kind": "softmax", "op": name, "shape": list(shape), "dim": dim,
                              "dtype": dtype_name(dtype), "direction": direction}
                    try:
                        if direction == "forward":
                            fns = {"ours": lambda: ours_forward(x, dim), "torch": lambda: row.torch_function(x, dim)}
                            if compile_here:
                                fns["compile"] = functools.partial(compiled(lambda t: row.torch_function(t, dim)), x)
                            nbytes = 2 * x.numel() * x.element_size()
                        else:
                            fns = {"ours": lambda: ours_backward(g, y, dim),
                                   "torch": lambda: aten_backward[name](g, y, dim, dtype)}
                            if compile_here:
                                torch._dynamo.reset()
                                fns["compile"] = functools.partial(
                                    torch.compile(lambda a, b: aten_backward[name](a, b, dim, dtype)), g, y)
                            nbytes = 3 * x.numel() * x.element_size()
                        if liger_here:
                            try:
                                fns["liger"] = liger_call(liger, x, g, direction)
                            except Exception as error:  # it refuses rows past 65536: a cell it lacks, not ours failing
                                record["liger_error"] = error_text(error)
                        with torch.no_grad():
                            for impl in fns:
                                if impl != "torch":
                                    check_close([fns[impl]()], [fns["torch"]()], f"{name} {impl} {direction}")
                            times = best_of_rounds(fns, device, reps, 2)
                        for impl, ms in times.items():
                            record[f"{impl}_ms"] = ms
                            record[f"{impl}_gbps"] = gbps(nbytes, ms)
                        record["speedup"] = times["torch"] / times["ours"]
                        record["floor_bytes"] = floor_bytes(device, x.numel(), x.element_size(), largest)
                        apply_softmax_floor(record, floor.rate(record["floor_bytes"]))
                    except Exception as error:  # reported, and the run goes on
                        record.update(failed=True, error=error_text(error))
                    records.append(record)
                    print("  " + softmax_line(record), flush=True)
                    fns = None  # its closures (Liger's graph) would keep this cell's tensors past release()
                del x, y, g
                release(device)
    floor.measure()
    print(f"copy floor of this run: {floor.describe(rounds=True)}", flush=True)
    for record in records:
        if "floor_bytes" in record:
            apply_softmax_floor(record, floor.rate(record["floor_bytes"]))
    return records


def apply_softmax_floor(record, rate):
    """Sets a --softmax record's floor_gbps and each side's % of it from rate."""
    record["floor_gbps"] = rate
    record["ours_pct_floor"] = 100 * record["ours_gbps"] / rate
    record["torch_pct_floor"] = 100 * record["torch_gbps"] / rate


def softmax_line(r):
    shape = " x ".join(map(str, r["shape"])) + (f" (dim {r['dim']})" if r["dim"] != -1 else "")
    head = f"{r['op']:<12} {shape:<28} {r['dtype']:<9} {r['direction']:<9}"
    if r.get("failed"):
        return f"{head} ERROR {r['error']}"
    compile_ms = fmt(r.get("compile_ms"), ".3f")
    liger = ""
    if "liger_ms" in r:
        liger = f"  liger {r['liger_ms']:8.3f} ms {r['liger_ms'] / r['ours_ms']:5.2f}x"
    elif "liger_error" in r:
        liger = "  liger refuses the row"
    return (f"{head} ours {r['ours_ms']:8.3f} ms  torch {r['torch_ms']:8.3f} ms  compile {compile_ms:>8} ms  "
            f"{r['speedup']:5.2f}x torch  ours {r['ours_pct_floor']:5.1f} % floor (torch {r['torch_pct_floor']:5.1f} %)"
            f"{liger}")


def print_softmax(records):
    print("\nSoftmax and log_softmax: ms (median), ours/torch speedup, % of the float32 copy floor (on the CPU, a copy "
          "of the cell's tensor bytes)")
    for r in records:
        print(softmax_line(r))


def write_json(path, run, results):
    with open(path, "w") as f:
        json.dump([run, *COPY_RECORDS, *(r for records in results.values() for r in records)], f, indent=1)


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
    if args.sizes:  # a size no table could hold fails at the start with a line, not in the floor's allocation
        memory = (torch.cuda.mem_get_info(device)[1] if on_gpu
                  else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        itemsize = min(DTYPES[d].itemsize for d in args.dtypes or ["bfloat16"])
        if 2 * max(args.sizes) * itemsize > memory:
            sys.exit(f"bench.py: --sizes {fmt_size(max(args.sizes))}: an input and an output of that many elements "
                     f"take {2 * max(args.sizes) * itemsize / 2**30:.0f} GiB, more than the "
                     f"{memory / 2**30:.0f} GiB here")
    processor = activations._cpu_info("model name") or platform.processor() or "unknown processor"
    name = torch.cuda.get_device_name(device) if on_gpu else f"CPU ({processor}, {platform.machine()})"
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads", flush=True)
    if not on_gpu:
        print(f"No CUDA GPU here: benchmarking on the CPU ({fmt_size(CPU_NUMEL)} elements unless --sizes says).")
        # torch's own CPU kernels take the capability's vectors; its GELU is oneDNN's, whose instruction set is
        # ONEDNN_MAX_CPU_ISA's (ATEN_CPU_CAPABILITY=avx2 alone left it on AVX-512, 2.3x faster in cache), and its
        # float32 and float64 tanh is MKL's (VML), whose instruction set is MKL_ENABLE_INSTRUCTIONS's (left on
        # AVX-512 its float32 tanh took 0.42-0.58 ns an element, one thread in cache, against 2.0-2.2 with AVX2).
        onednn, mkl = (os.environ.get(name) or "the best the processor has"
                       for name in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"))
        print(f"torch's CPU capability: {torch.backends.cpu.get_cpu_capability()}; oneDNN's instruction set: "
              f"{onednn}; MKL's: {mkl}")
        malloc_note = keep_freed_memory()
        if malloc_note:
            print(malloc_note)
        warm_torch_cpu_math()

    reps = args.reps or DEFAULT_REPS
    rows = table_rows(args.ops)
    sections = sections_of(args)
    run = {"kind": "run", "device": name, "torch": torch.__version__, "argv": sys.argv[1:], "reps": reps,
           "sections": sections, "section_seconds": {}}
    results = {}
    for section in sections:
        begin = time.perf_counter()
        print(f"\n== {section} ==", flush=True)
        if section in ("table", "sweep"):
            results[section] = run_table(args, rows, device, name, reps, sweep=section == "sweep")
        elif section == "overhead":
            results[section] = run_overhead(rows, device)
            print_overhead(results[section])
        elif section == "vmap":
            results[section] = run_vmap(rows, device, reps)
            print_vmap(results[section])
        elif section == "softmax":
            results[section] = run_softmax(args, device, reps)
            print_softmax(results[section])
        elif section == "chunked":
            results[section] = run_chunked(args, device, name, reps)
        elif section == "kernelbench":
            problems = kernelbench_problems(args.ops)
            results[section] = run_kernelbench(problems, device, args.reps or KERNELBENCH_TRIALS, reps)
            print_kernelbench(results[section])
        elif section == "models":
            modes = args.models or (list(MODEL_MODES) if on_gpu else ["eager"])
            results[section] = run_models(device, modes, args.ops)
            print_models(results[section])
        elif section == "ddp":
            results[section] = run_ddp(args.ops)
        run["section_seconds"][section] = round(time.perf_counter() - begin, 1)
        print(f"({section}: {run['section_seconds'][section]:.0f} s)", flush=True)
        if args.json:  # after every section: a run cut short keeps what it finished
            write_json(args.json, run, results)
    if args.json:
        print(f"wrote {args.json}")
    if args.plot:
        plot([r for name in ("sweep", "softmax") for r in results.get(name, [])], args.plot)
    failed = [r for records in results.values() for r in records if r.get("failed")]
    if failed:
        print(f"\nbench.py: FAILED: {len(failed)} measurement(s) failed their check or raised:", file=sys.stderr)
        for r in failed:
            what = " ".join(str(r[key]) for key in ("kind", "op", "problem", "model", "activation", "dtype",
                                                     "direction", "mode") if key in r)
            print(f"  {what}: {r['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
