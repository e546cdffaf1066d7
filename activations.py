"""Neural-network activations as JIT-compiled PyTorch operators with CPU and CUDA kernels of their own.

    import activations
    y = activations.gelu(x, approximate="tanh")   # torch's signature; forward and backward run our kernels
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), activations.SELU())
    activations.swap_activations(model)          # torch.nn activation modules -> ours

The ops are the rows of the op table OPS below (relu, leaky_relu, elu, selu, sigmoid, tanh, silu/swish, gelu,
hardsigmoid, softplus, softsign, hardtanh, relu6, mish), and softmax and log_softmax from the small table
REDUCTIONS beside it; each with double backward, forward-mode AD and a vmap batching rule. Under torch.compile and
torch.export the elementwise functions give the compiler torch's own, which it can fuse (FUSE_UNDER_COMPILE).

At import this module reads the C++/CUDA sources in kernels/ (or the copy embedded in a generated single-file
build), compiles them once with torch.utils.cpp_extension into one library (its units compiled in parallel),
caches it keyed by everything that affects it, and loads it: that registers the operators
torch.ops.activations.<name> with their CPU, CUDA, Meta, Autograd and batching kernels. Later imports load the
cached library without compiling.

Command line:
    python activations.py build [--cuda-arch 9.0] [--cpu-only]   prebuild the cache for this machine
    python activations.py kernelbench NAME [-o FILE]            write a self-contained KernelBench source (PROBLEMS)

Environment: ACTIVATIONS_CACHE_DIR (where builds are cached, default ~/.cache/activations),
ACTIVATIONS_CUDA_ARCH (e.g. "9.0" or "8.0;9.0": compile CUDA for these GPUs, even with none present),
ACTIVATIONS_CPU_ONLY=1 (skip CUDA), CUDA_HOME (the CUDA toolkit), ACTIVATIONS_VERBOSE=1 (show compiler commands).
"""

import collections
import contextlib
import ctypes
import dataclasses
import functools
import glob
import hashlib
import json
import linecache
import numbers
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
import types
import warnings

import torch
import torch.nn.functional as F

NAMESPACE = "activations"
KERNEL_SUFFIXES = (".cuh", ".h", ".cpp", ".cu")

# A generated single-file build (`python activations.py kernelbench ...`) replaces this line with the kernel
# sources, so the file needs no kernels/ folder beside it.
_EMBEDDED_SOURCES = None

# ---------------------------------------------------------------------------------------------------------------
# The op table: one row per activation, in the spirit of PyTorch's derivatives.yaml. Everything else follows from
# it: the operators' schemas and registrations (through the generated kernels/op_table.h), the autograd layer's
# saved state, the Python functions, the modules, swap_activations, the KernelBench problems, the tests and
# bench.py's rows. The math is the row's functor in kernels/activations.cuh (forward, derivative, second
# derivative).

Param = collections.namedtuple("Param", "name default keyword_only", defaults=(False,))
KernelBench = collections.namedtuple("KernelBench", "problem number reference init_inputs", defaults=(None, ()))


@dataclasses.dataclass(frozen=True)
class Activation:
    """One activation.

    name:           our function activations.<name> and operator torch.ops.activations.<name>
    functor:        its math, a functor template in kernels/activations.cuh
    torch_function: torch's function, called as torch_function(x, *params)
    torch_module:   torch's module class; ours subclasses it and swap_activations replaces it
    params:         torch's parameters after the input, with torch's names and defaults (a str parameter lists its
                    `choices`; the kernels get the index of the value)
    constants:      functor arguments after the parameters (SELU's alpha and scale, ReLU6's bounds)
    saves:          what the backward keeps of an out-of-place call: "mask" (1 bit per element, piecewise-linear
                    ops), "input" or "output" (in place, the input is gone: a mask, else the output where the
                    functor can work from it, else a copy of the input, as torch does)
    inplace:        torch's in-place form: "flag" (f(x, inplace=True) and f_(x)), "function" (only f_(x)), None
    bounds:         its two parameters are a lower and an upper bound: a call whose first exceeds its second
                    raises, as torch's (hardtanh's min_val and max_val)
    kernelbench:    the KernelBench level-1 problem, if any
    autocast_to_float: under CUDA autocast the operator runs on its floating-point CUDA inputs cast to float32 (not
                    float64), as torch's autocast runs torch's op (its "fp32" list: softplus); otherwise autocast
                    leaves it alone, as it leaves torch's other activations
    """

    name: str
    functor: str
    torch_function: object
    torch_module: type
    params: tuple = ()
    constants: tuple = ()
    saves: str = "input"
    inplace: str = None
    choices: dict = dataclasses.field(default_factory=dict)
    bounds: bool = False
    kernelbench: KernelBench = None
    autocast_to_float: bool = False

    def __post_init__(self):
        assert self.saves in ("mask", "input", "output"), self.saves
        assert self.inplace in ("flag", "function", None), self.inplace
        assert len(self.params) + len(self.constants) <= 4, "functors take at most 4 arguments"
        assert not self.bounds or len(self.params) == 2, "bounds: a lower and an upper bound"

    def defaults(self):
        """The parameters' default values, in order."""
        return tuple(param.default for param in self.params)

    @property
    def function(self):
        """Our function: activations.<name>, called as function(x, *params)."""
        return globals()[self.name]


def _gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


_OPS = [
    Activation("relu", "Relu", torch.relu, torch.nn.ReLU, saves="mask", inplace="flag",
               kernelbench=KernelBench("relu", 19)),
    Activation("leaky_relu", "LeakyRelu", F.leaky_relu, torch.nn.LeakyReLU, params=(Param("negative_slope", 0.01),),
               saves="mask", inplace="flag", kernelbench=KernelBench("leaky_relu", 20)),
    Activation("elu", "Elu", F.elu, torch.nn.ELU, params=(Param("alpha", 1.0),), constants=(1.0,), inplace="flag",
               kernelbench=KernelBench("elu", 31, init_inputs=(1.0,))),
    Activation("selu", "Elu", torch.selu, torch.nn.SELU, constants=(1.6732632423543772848170429916717,
               1.0507009873554804934193349852946), inplace="flag", kernelbench=KernelBench("selu", 27)),
    Activation("sigmoid", "Sigmoid", torch.sigmoid, torch.nn.Sigmoid, saves="output", inplace="function",
               kernelbench=KernelBench("sigmoid", 21)),
    Activation("tanh", "Tanh", torch.tanh, torch.nn.Tanh, saves="output", inplace="function",
               kernelbench=KernelBench("tanh", 22)),
    Activation("silu", "Silu", F.silu, torch.nn.SiLU, inplace="flag",
               kernelbench=KernelBench("swish", 25, reference=lambda x: x * torch.sigmoid(x))),
    Activation("gelu", "Gelu", _gelu, torch.nn.GELU, params=(Param("approximate", "none", keyword_only=True),),
               choices={"approximate": ("none", "tanh")}, kernelbench=KernelBench("gelu", 26)),
    Activation("hardsigmoid", "Hardsigmoid", F.hardsigmoid, torch.nn.Hardsigmoid, saves="mask", inplace="flag",
               kernelbench=KernelBench("hardsigmoid", 28)),
    Activation("softplus", "Softplus", F.softplus, torch.nn.Softplus,
               params=(Param("beta", 1.0), Param("threshold", 20.0)), kernelbench=KernelBench("softplus", 29),
               autocast_to_float=True),
    Activation("softsign", "Softsign", F.softsign, torch.nn.Softsign,
               kernelbench=KernelBench("softsign", 30, reference=lambda x: x / (1 + torch.abs(x)))),
    Activation("hardtanh", "Hardtanh", F.hardtanh, torch.nn.Hardtanh,
               params=(Param("min_val", -1.0), Param("max_val", 1.0)), saves="mask", inplace="flag", bounds=True,
               kernelbench=KernelBench("hardtanh", 32)),
    Activation("relu6", "Hardtanh", F.relu6, torch.nn.ReLU6, constants=(0.0, 6.0), saves="mask", inplace="flag"),
    Activation("mish", "Mish", F.mish, torch.nn.Mish, inplace="flag"),
]
OPS = {row.name: row for row in _OPS}

# Softmax and log_softmax reduce over a dimension, so they are not rows of the elementwise table above: they
# have this small table of their own, operators of their own (kernels/softmax.cpp: softmax(x, dim, dtype=None),
# log_softmax(...), and softmax_backward / log_softmax_backward(grad_output, output, dim), which work from the
# forward's output as torch's do), CUDA kernels (kernels/softmax.cu) and autograd layer
# (kernels/softmax_autograd.cpp).
Reduction = collections.namedtuple("Reduction", "name torch_function torch_module kernelbench")
REDUCTIONS = {
    "softmax": Reduction("softmax", torch.softmax, torch.nn.Softmax,
                         KernelBench("softmax", 23, reference=lambda x: torch.softmax(x, dim=1))),
    "log_softmax": Reduction("log_softmax", torch.log_softmax, torch.nn.LogSoftmax,
                             KernelBench("log_softmax", 24, reference=lambda x: torch.log_softmax(x, dim=1))),
}


def _schema_default(value):
    return repr(value) if isinstance(value, str) else repr(float(value))


def _functors():
    """The functors the op table uses, in table order."""
    return list(dict.fromkeys(row.functor for row in OPS.values()))


def op_table_header():
    """The C++ header kernels/op_table.h, generated from the op table: the functors to instantiate and one row per
    operator. It is part of the sources (and so of the build key) like the files in kernels/."""
    ops = list(OPS.values())
    functors = _functors()
    rows = []
    for row in ops:
        params = []
        for param in row.params:
            if param.keyword_only and "*" not in params:
                params.append("*")
            kind = "str" if param.name in row.choices else "float"
            params.append(f"{kind} {param.name}={_schema_default(param.default)}")
        arguments = ", ".join(["Tensor input"] + params)
        choices = [("|".join(row.choices[p.name]) if p.name in row.choices else "") for p in row.params]
        constants = ", ".join(repr(float(c)) for c in row.constants) or "0.0"
        rows.append(
            f'    {{"{row.name}", "({arguments})", Functor::{row.functor}, Saves::{row.saves.capitalize()}, '
            f"{str(row.inplace is not None).lower()}, {str(row.bounds).lower()}, {len(row.params)}, "
            f'{{{", ".join(json.dumps(c) for c in choices) or chr(34) * 2}}}, {len(row.constants)}, {{{constants}}}, '
            f"{str(row.autocast_to_float).lower()}}},"
        )
    return "\n".join([
        "// Generated by activations.py from its op table (OPS): edit the table there, not this file.",
        "#pragma once",
        "",
        f"#define ACTIVATIONS_FOR_EACH_FUNCTOR(X) {' '.join(f'X({f})' for f in functors)}",
        "",
        "namespace activations {",
        "",
        f"enum class Functor : int {{ {', '.join(functors)} }};",
        "",
        "// What the backward of an out-of-place call keeps: one bit per element, the input or the output.",
        "enum class Saves : int { Mask, Input, Output };",
        "",
        "struct OpRow {",
        "  const char* name;        // the operator; with `inplace`, also name_ (in place)",
        "  const char* arguments;   // its schema's arguments, with torch's names and defaults",
        "  Functor functor;",
        "  Saves saves;",
        "  bool inplace;",
        "  bool bounds;              // parameters 0 and 1 are a lower and an upper bound (see Activation.bounds)",
        "  int num_params;           // the parameters after x, in order",
        "  const char* choices[2];   // per parameter: a str parameter's values joined by '|' (its index is passed)",
        "  int num_constants;        // functor arguments after the parameters",
        "  double constants[2];",
        "  bool autocast_to_float;   // CUDA autocast runs it on float32 (see Activation.autocast_to_float)",
        "};",
        "",
        "inline constexpr OpRow kOpRows[] = {",
        *rows,
        "};",
        "",
        "}  // namespace activations",
        "",
    ])


# ---------------------------------------------------------------------------------------------------------------
# Sources


def kernel_sources():
    """{file name: text} of the kernel sources: the embedded copy, else the files in kernels/; and op_table.h,
    generated from the op table."""
    if _EMBEDDED_SOURCES is not None:
        sources = dict(_EMBEDDED_SOURCES)
    else:
        kernel_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
        sources = {}
        for path in sorted(glob.glob(os.path.join(kernel_dir, "*"))):
            if path.endswith(KERNEL_SUFFIXES):
                with open(path, encoding="utf-8") as f:
                    sources[os.path.basename(path)] = f.read()
        if not sources:
            raise RuntimeError(f"activations: no kernel sources found in {kernel_dir}")
    sources["op_table.h"] = op_table_header()
    for functor in _functors():  # one CUDA unit per functor, so that nvcc compiles them side by side
        sources[f"cuda_{functor}.cu"] = (
            f'#include "cuda_launchers.cuh"\nnamespace activations {{ template struct CudaKernels<{functor}>; }}\n'
        )
    for unit, (storage, backward) in _SOFTMAX_UNITS.items():  # and one per softmax dtype and direction
        sources[unit] = (f'#include "softmax_kernels.cuh"\nnamespace activations {{ namespace softmax_cuda {{\n'
                         f'ACTIVATIONS_SOFTMAX_INSTANTIATE({storage}, {backward})\n}} }}\n')
    return sources


# softmax's generated CUDA units: {file name: (storage type, backward)}.
_SOFTMAX_UNITS = {
    f"softmax_{dtype}_{direction}.cu": (storage, backward)
    for dtype, storage in (("float32", "float"), ("float64", "double"), ("float16", "__half"),
                           ("bfloat16", "__nv_bfloat16"))
    for direction, backward in (("forward", "false"), ("backward", "true"))
}


_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$", re.MULTILINE)


def expand_includes(text, sources, _seen=None):
    """Inline `#include "name"` of our own headers, each once per translation unit, so that every unit is one
    self-contained text, whether the sources come from files or not (and its hash covers every header it uses).
    `#pragma once` goes: the inlining does its job, and g++ warns about it in a main file."""
    seen = set() if _seen is None else _seen

    def inline(match):
        name = match.group(1)
        if name not in sources:
            raise RuntimeError(f"activations: kernel source includes {name!r}, which is not in kernels/")
        if name in seen:
            return f"// {name}: already included above"
        seen.add(name)
        return f"// ---- begin {name}\n{expand_includes(sources[name], sources, seen)}\n// ---- end {name}"

    return _PRAGMA_ONCE.sub("", _LOCAL_INCLUDE.sub(inline, text))


# The library built from kernels/: {part: (C++ units, CUDA units)}; its units compile side by side (ninja). A C++
# unit that includes torch's headers spends most of its compile time parsing them, so all the torch glue is one
# unit: activations.cpp (the operators) includes the autograd layer (autograd.cpp) and softmax's operators and
# autograd layer, which parse the same ATen and dispatcher headers. The CPU loops (cpu_kernels.cpp, no torch
# headers but ATen/Parallel.h) compile beside it, and so does gelu_table_cpu.cpp (AVX-512 intrinsics: immintrin.h,
# which the loops avoid for their compile time), and the CUDA units beside all three. With the autograd layer a unit
# (and library) of its own, the 2-core Ice Lake Xeon parsed the dispatcher's headers twice: one unit for the glue
# took 13.1-14.1 s of g++ against 20.9-23.3 s for the two, and the CPU build's cold import 13.3-18.7 s (median
# 15.6) against 18.2-26.6 s (median 22.3) (docs/performance.md, build time).
LIBRARIES = {
    "ops": (("activations.cpp", "cpu_kernels.cpp", "gelu_table_cpu.cpp"),
            ("cuda_kernels.cu", "softmax.cu", *(f"cuda_{f}.cu" for f in _functors()), *_SOFTMAX_UNITS)),
}

# Headers that torch's own headers include but its wheels lack, served from kernels/: {include name: our file}.
SYSTEM_HEADER_STUBS = {"nlohmann/json.hpp": "nlohmann_json_stub.h"}


# ---------------------------------------------------------------------------------------------------------------
# The CUDA toolchain and the GPUs to build for


def find_cuda_home():
    """The CUDA toolkit folder with bin/nvcc and the runtime headers, or None.

    torch guesses CUDA_HOME from the nvcc on PATH; where that nvcc is a wrapper script outside the toolkit the
    guess is wrong and linking fails (cannot find -lcudart), so each candidate is checked for the headers."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for home in candidates:
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")) and os.path.isfile(
            os.path.join(home, "include", "cuda_runtime.h")
        ):
            return home
    return None


def _normalize_archs(text):
    """'9.0' / '8.0;9.0' / '8.0 9.0' / 'sm_90' / '90a' -> ('8.0', '9.0') etc."""
    archs = set()
    for item in re.split(r"[;,\s]+", text.strip().lower()):
        item = item.removeprefix("sm_").removeprefix("compute_").removesuffix("+ptx")
        if re.fullmatch(r"\d+\.\d+a?", item):
            archs.add(item)
        elif match := re.fullmatch(r"(\d+)(\d)(a?)", item):
            archs.add(f"{match.group(1)}.{match.group(2)}{match.group(3)}")
        elif item:
            raise ValueError(f"activations: cannot read CUDA arch {item!r} (expected e.g. 9.0 or 8.0;9.0)")
    return tuple(sorted(archs))


def _visible_gpu_archs():
    """Compute capabilities of the GPUs here, through NVML where it exists: it does not initialise CUDA, so a
    process that forks workers after `import activations` can still use CUDA in them."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        try:
            count = ctypes.c_uint()
            if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                raise OSError("nvmlDeviceGetCount failed")
            archs = set()
            for index in range(count.value):
                handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
                if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                    raise OSError("nvmlDeviceGetHandleByIndex failed")
                if nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                    raise OSError("nvmlDeviceGetCudaComputeCapability failed")
                archs.add(f"{major.value}.{minor.value}")
            return tuple(sorted(archs))
        finally:
            nvml.nvmlShutdown()
    except (OSError, AttributeError):
        pass
    if torch.cuda.is_available():
        return tuple(sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}))
    return ()


def build_plan(cuda_arch=None, cpu_only=None):
    """What to build: {'cuda_archs': (...), 'cuda_home': path or None, 'no_cuda_reason': text or None}."""
    if cpu_only is None:
        cpu_only = os.environ.get("ACTIVATIONS_CPU_ONLY", "") not in ("", "0")
    cuda_arch = cuda_arch or os.environ.get("ACTIVATIONS_CUDA_ARCH")
    plan = {"cuda_archs": (), "cuda_home": None, "no_cuda_reason": None}
    if cpu_only:
        plan["no_cuda_reason"] = "CUDA was switched off (ACTIVATIONS_CPU_ONLY or --cpu-only)"
    elif torch.version.cuda is None:
        plan["no_cuda_reason"] = f"this torch ({torch.__version__}) is built without CUDA"
    elif (cuda_home := find_cuda_home()) is None:
        plan["no_cuda_reason"] = "no CUDA toolkit (nvcc) was found; set CUDA_HOME to the toolkit folder"
    elif not (archs := _normalize_archs(cuda_arch) if cuda_arch else _visible_gpu_archs()):
        plan["no_cuda_reason"] = (
            "no GPU was visible when the kernels were built; build for one with "
            "`python activations.py build --cuda-arch 9.0` or ACTIVATIONS_CUDA_ARCH=9.0"
        )
    else:
        plan.update(cuda_archs=archs, cuda_home=cuda_home)
    return plan


# ---------------------------------------------------------------------------------------------------------------
# Build and cache

# -fopenmp: at::parallel_for runs the CPU kernels on torch's OpenMP threads (torch ships libgomp.so.1 and has
# loaded it already, so the library links against that same runtime); without it the loops run on one thread.
# -O1 with -O3's loop vectorizer: the CPU loops are still vectorized (AVX2, the math inlined, no calls left in
# them) and give the same bits as at -O2 (kernels/activations.cuh writes its fused multiply-adds out), while
# torch's inline code that makes up most of this file gets cheaper code generation: the cold build took 0.8-4.7 s
# less on the 2-core machine (8 alternating runs: 13.4-15.1 s against 14.3-18.4 s at -O2, which in turn had saved
# 4 s on -O3). The price: in the calmest of the CPU runs that alternated the two builds, the loops took 0-8 % longer
# (bfloat16 ELU the most, float32 ReLU not at all); the host time of a call on the H100 machine did not change
# beyond its noise (alternating runs of bench.py --overhead with the two builds).
# ggc-min-heapsize (KiB): g++ collects its garbage only once its heap passes 1 GiB. Compiling this file takes
# about 0.9 GiB, so it never collects; with the default, 128 MiB, it spent 0.6-0.9 s collecting on the way there.
# -fno-trapping-math: lets g++ evaluate both sides of a select in the CPU loops, which it must to vectorize them
# (we never read floating-point exception flags; results are unchanged).
# -ffp-contract=off: the CPU loops are compiled with -fexpensive-optimizations (see ACTIVATIONS_CPU_LOOP in
# kernels/cpu_kernels.cpp), which would let g++ fuse a * b + c on its own; the math header writes each fused
# multiply-add it wants, and the rest are rounded as written.
# -Wno-psabi: g++ warns that a helper instantiated for 512-bit vectors outside an AVX-512 function
# (bfloat16_bits_rounded, from softmax's store_vector) would pass them differently from older compilers; the helpers
# are internal and inlined into their loops, so no call crosses that boundary.
CXX_FLAGS = [
    "-O1",
    "-ftree-vectorize",
    "-fvect-cost-model=dynamic",
    "-fopenmp",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "--param=ggc-min-heapsize=1048576",
    "-Wno-psabi",
]
LD_FLAGS = ["-fopenmp"]


@functools.cache
def _first_processor_info():
    """{field: value} of the first processor in /proc/cpuinfo (read once), empty where it cannot be read."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor's block ends here
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _cpu_info(field):
    """The first processor's `field` in /proc/cpuinfo (flags, vendor_id, cpu family), "" where it cannot be read."""
    return _first_processor_info().get(field, "")


def _cpu_features():
    """The processor's feature flags as Linux names them, empty where they cannot be read: then only what torch's
    CPU capability implies is used."""
    return set(_cpu_info("flags").split())


def _avx512_in_halves():
    """Whether the processor is AMD's Zen 4 (family 25 with AVX-512), which runs each 512-bit instruction as two
    256-bit halves: there the CPU loops that memory bounds take 256-bit vectors (memory_bound_loop in
    kernels/cpu_kernels.cpp), faster on it than 512-bit ones; Intel's AVX-512 processors keep 512, with which their
    float64 hardsigmoid forward was faster."""
    return _cpu_info("vendor_id") == "AuthenticAMD" and _cpu_info("cpu family") == "25"


def cpu_flags():
    """On x86-64, where torch runs its own CPU kernels with AVX2 (torch.backends.cpu.get_cpu_capability(), which
    ATEN_CPU_CAPABILITY can lower), our CPU loops are compiled for AVX2 + FMA + F16C too (see kernels/
    activations.cpp): ELU's float loop ran 3.5x faster than with the SSE2 baseline. Where torch runs AVX-512, our
    elementwise and softmax loops take 512-bit vectors as well (ACTIVATIONS_CPU_AVX512: twice the speed of the ops
    with an exponential, which ran at 0.46-0.66x of torch's AVX-512 kernels before). The flags are part of the cache
    key, so a cache shared with a machine without AVX2 gets a build of its own there, never an illegal
    instruction."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    capability = torch.backends.cpu.get_cpu_capability()
    flags = {"AVX2": ["-DACTIVATIONS_CPU_AVX2"],
             "AVX512": ["-DACTIVATIONS_CPU_AVX2", "-DACTIVATIONS_CPU_AVX512"]}.get(capability, [])
    if flags:
        # Every function that uses 256- or 512-bit registers returns with vzeroupper (see ACTIVATIONS_CPU_LOOP in
        # kernels/cpu_kernels.cpp). g++ 12 inserted it where a loop's optimize attribute had
        # expensive-optimizations; g++ 13.3 (the H200 host's) inserted it nowhere, and every return left the
        # upper halves dirty.
        flags.append("-mvzeroupper")
    if capability == "AVX512" and "avx512_bf16" in _cpu_features():
        flags.append("-DACTIVATIONS_CPU_AVX512_BF16")
    if capability == "AVX512" and _avx512_in_halves():
        flags.append("-DACTIVATIONS_CPU_AVX512_IN_HALVES")
    return flags


CUDA_FLAGS = ["-O3", "-lineinfo"]


def _cuda_arch_flags(archs):
    flags = []
    for arch in archs:
        number = arch.replace(".", "")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    # PTX of the newest arch as well, so newer GPUs than those listed can still run the kernels.
    newest = archs[-1].replace(".", "")
    flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return flags


def build_spec(plan, part, sources=None):
    """Everything that decides the compiled library `part` (of LIBRARIES): its hash names the cache entry."""
    sources = kernel_sources() if sources is None else sources
    cpp_units, cuda_units = LIBRARIES[part]
    with_cuda = bool(plan["cuda_archs"]) and bool(cuda_units)
    spec = {
        "part": part,
        # Each unit as the compiler gets it: our headers inlined (see expand_includes).
        "units": {name: expand_includes(sources[name], sources) for name in cpp_units + (cuda_units if with_cuda else ())},
        "header_stubs": {name: sources[stub] for name, stub in SYSTEM_HEADER_STUBS.items()},
        "cuda": with_cuda,
        "cflags": CXX_FLAGS + cpu_flags() + (["-DACTIVATIONS_WITH_CUDA"] if with_cuda else []),
        "ldflags": LD_FLAGS,
        "cuda_flags": CUDA_FLAGS + _cuda_arch_flags(plan["cuda_archs"]) if with_cuda else [],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cxx11_abi": torch.compiled_with_cxx11_abi(),
        "platform": sys.platform,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    spec["name"] = f"{NAMESPACE}_{part}{'_cuda' if with_cuda else ''}_{digest[:16]}"
    return spec


def cache_root():
    """Where builds are looked for: ACTIVATIONS_CACHE_DIR, else $XDG_CACHE_HOME/activations or
    ~/.cache/activations; without a home directory (HOME unset for a user with no passwd entry, where `~` stays
    `~`), the temporary folder's fallback (_fallback_cache_root)."""
    configured = os.environ.get("ACTIVATIONS_CACHE_DIR")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):  # a relative base would put the cache below whatever the working directory is
        return _fallback_cache_root()
    return os.path.join(base, NAMESPACE)


def _fallback_cache_root():
    """A folder of this user's in the temporary folder. Its name is predictable, so it must be this user's own and
    writable by nobody else: a library planted there would be loaded."""
    fallback = os.path.join(tempfile.gettempdir(), f"{NAMESPACE}-cache-{os.getuid()}")
    os.makedirs(fallback, mode=0o700, exist_ok=True)
    info = os.lstat(fallback)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"activations: {fallback} is not a directory of this user's that only it can write; "
                           "set ACTIVATIONS_CACHE_DIR to a directory of your own")
    return fallback


# Characters that ninja's build files cannot hold in a path (torch's writer escapes spaces only).
_NINJA_UNSAFE = (":", "$", "\n")


def _writable_cache_root():
    """The cache folder to build into: cache_root() where it can be written, else (unless ACTIVATIONS_CACHE_DIR
    names it) the temporary folder's fallback, with a warning."""
    root = cache_root()
    try:
        os.makedirs(root, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root):
            pass
    except OSError as error:
        if os.environ.get("ACTIVATIONS_CACHE_DIR"):
            raise RuntimeError(
                f"activations: the cache directory {root} (ACTIVATIONS_CACHE_DIR) is not writable "
                f"({error.strerror or error}): set ACTIVATIONS_CACHE_DIR to a writable directory, or unset it"
            ) from error
        unwritable, root = root, _fallback_cache_root()
        warnings.warn(f"activations: cache directory {unwritable} is not writable ({error.strerror or error}); "
                      f"building in {root}. Set ACTIVATIONS_CACHE_DIR to choose another.")
        try:
            with tempfile.NamedTemporaryFile(dir=root):
                pass
        except OSError as fallback_error:
            raise RuntimeError(f"activations: the cache directory {root} is not writable either "
                               f"({fallback_error.strerror or fallback_error}): set ACTIVATIONS_CACHE_DIR to a "
                               "writable directory") from fallback_error
    unsafe = [c for c in _NINJA_UNSAFE if c in root]
    if unsafe:
        raise RuntimeError(f"activations: the cache directory {root} holds {unsafe[0]!r}, which ninja's build files "
                           "cannot hold: set ACTIVATIONS_CACHE_DIR to a path without ':' or '$'")
    return root


def _library_path(root, name):
    return os.path.join(root, name, f"{name}.so")


def _checksum(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _cached_library(root, name):
    """Path of a complete cached build, or None. A library is complete when its checksum file matches it: it is
    published by renames, so a killed build leaves no half-written library behind, and a corrupted or truncated
    one fails the check."""
    library = _library_path(root, name)
    try:
        with open(library + ".sha256") as f:
            expected = f.read().strip()
        return library if _checksum(library) == expected else None
    except OSError:
        return None


@contextlib.contextmanager
def _build_lock(root, name):
    """One build per cache entry across processes: the others wait, then load what it published. The lock file is
    opened for reading (flock needs no more), so another user's, in a cache shared with them, serves as well."""
    import fcntl

    path = os.path.join(root, f"{name}.lock")
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError as error:
        raise RuntimeError(f"activations: cannot open the build lock {path} ({error.strerror or error}): set "
                           "ACTIVATIONS_CACHE_DIR to a directory of your own") from error
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"activations: waiting for another process's build of {name} (lock: {path})", file=sys.stderr)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


@contextlib.contextmanager
def _cpp_extension(cuda_home):
    """torch.utils.cpp_extension, imported only when compiling (it is slow to import), with CUDA_HOME pointed at
    the toolkit we found."""
    import logging

    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its "No CUDA runtime is found" warning is expected on a machine with no GPU
    saved_env = os.environ.get("CUDA_HOME")
    try:
        if cuda_home:
            os.environ["CUDA_HOME"] = cuda_home
        import torch.utils.cpp_extension as cpp_extension

        saved_home = cpp_extension.CUDA_HOME
        if cuda_home:
            cpp_extension.CUDA_HOME = cuda_home
        try:
            yield cpp_extension
        finally:
            cpp_extension.CUDA_HOME = saved_home
    finally:
        logger.setLevel(level)
        if saved_env is None:
            os.environ.pop("CUDA_HOME", None)
        else:
            os.environ["CUDA_HOME"] = saved_env


def _compile(spec, cpp_extension, root):
    """Compile one library into a private folder (its units side by side, through ninja), then publish it into the
    cache by renames. Returns its path. torch.utils.cpp_extension.load has loaded it into this process already."""
    name = spec["name"]
    compiler = (os.environ.get("CXX", "").split() or ["c++"])[0]  # what torch.utils.cpp_extension runs
    if shutil.which(compiler) is None:
        raise BuildError(f"activations: no C++ compiler: {compiler!r} (the CXX variable, else c++) is not on PATH; "
                         "install g++ or clang++, or set CXX to one", spec)
    # Left by a killed build (the lock is ours: no other process builds or publishes this entry now).
    for stale in glob.glob(os.path.join(root, f"{name}.build-*")):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in glob.glob(_library_path(root, name) + ".*tmp*"):
        with contextlib.suppress(OSError):
            os.remove(stale)
    build_dir = tempfile.mkdtemp(prefix=f"{name}.build-", dir=root)
    try:
        try:
            paths = []
            for unit, text in spec["units"].items():
                paths.append(os.path.join(build_dir, unit))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    f.write(text)
            stub_dir = os.path.join(build_dir, "header_stubs")
            for header, text in spec["header_stubs"].items():
                os.makedirs(os.path.dirname(os.path.join(stub_dir, header)), exist_ok=True)
                with open(os.path.join(stub_dir, header), "w", encoding="utf-8") as f:
                    f.write(text)
            cpp_extension.load(
                name=name,
                sources=paths,
                # Copies: load appends to the lists it is given (the CUDA libraries, for one), which would leak
                # into the next build in this process (the CPU fallback after a failed CUDA build).
                extra_cflags=list(spec["cflags"]),
                extra_cuda_cflags=list(spec["cuda_flags"]),
                extra_ldflags=list(spec["ldflags"]),
                extra_include_paths=[stub_dir],
                build_directory=build_dir,
                with_cuda=spec["cuda"],
                is_python_module=False,
                verbose=os.environ.get("ACTIVATIONS_VERBOSE", "") not in ("", "0"),
            )
        except Exception as error:  # load raises RuntimeError/subprocess errors with the compiler's output
            log = os.path.join(root, f"{name}.log")
            with open(log, "w") as f:
                f.write(str(error))
            # from None: the message holds the compiler's output, which the chained cause would print again
            raise BuildError(f"activations: building {name} failed (log: {log}):\n{error}", spec) from None
        _LOADED.add(name)
        built = os.path.join(build_dir, f"{name}.so")
        library = _library_path(root, name)
        staged = library + f".tmp-{os.getpid()}"
        try:
            os.makedirs(os.path.dirname(library), exist_ok=True)
            shutil.copyfile(built, staged)
            os.replace(staged, library)
            with open(library + ".sha256.tmp", "w") as f:
                f.write(_checksum(library))
            os.replace(library + ".sha256.tmp", library + ".sha256")
        except OSError as error:  # a full disk, say: this process has the library loaded and goes on without a cache
            for partial in (staged, library + ".sha256.tmp"):
                with contextlib.suppress(OSError):
                    os.remove(partial)
            warnings.warn(f"activations: the build of {name} could not be saved in {root} ({error.strerror or error});"
                          " this process uses it, the next import compiles again")
            return built
        return library
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


class BuildError(RuntimeError):
    """The kernel sources failed to compile; the message holds the compiler's output, `spec` what was built."""

    def __init__(self, message, spec):
        super().__init__(message)
        self.spec = spec


# Cache entries whose library this process has loaded (torch.ops.load_library must not register them twice).
_LOADED = set()


def _load_cached(root, spec):
    """Load spec's library from the cache; returns its path, or None when there is no complete, loadable one."""
    library = _cached_library(root, spec["name"])
    if library is None or spec["name"] in _LOADED:
        return library
    try:
        torch.ops.load_library(library)
    except OSError:  # unloadable although its checksum matched: drop it, to be rebuilt
        shutil.rmtree(os.path.dirname(library), ignore_errors=True)
        return None
    _LOADED.add(spec["name"])
    return library


def _build_or_load(plan, sources):
    """Load every library of LIBRARIES for plan from the cache, compiling those that are not there yet. Returns
    ({part: path}, [the parts compiled])."""
    specs = [build_spec(plan, part, sources) for part in LIBRARIES]
    # A complete build loads from a cache that cannot be written (one shared read-only, say).
    libraries = {spec["part"]: _load_cached(cache_root(), spec) for spec in specs}
    missing = [spec for spec in specs if libraries[spec["part"]] is None]
    if not missing:
        return libraries, []
    root = _writable_cache_root()
    with contextlib.ExitStack() as locks:
        # One build per cache entry across processes: take every lock needed, in name order (so that two processes
        # never wait on each other), and build what is still missing once they are ours.
        for spec in sorted(missing, key=lambda spec: spec["name"]):
            locks.enter_context(_build_lock(root, spec["name"]))
        to_build = []
        for spec in missing:
            libraries[spec["part"]] = _load_cached(root, spec)
            if libraries[spec["part"]] is None:
                to_build.append(spec)
        if not to_build:
            return libraries, []
        start = time.perf_counter()
        with _cpp_extension(plan["cuda_home"]) as cpp_extension:
            for spec in to_build:
                libraries[spec["part"]] = _compile(spec, cpp_extension, root)
    what = f"CPU + CUDA (sm {', '.join(plan['cuda_archs'])}) kernels" if plan["cuda_archs"] else "CPU kernels"
    print(f"activations: compiled {what} in {time.perf_counter() - start:.1f} s -> {root}", file=sys.stderr)
    return libraries, sorted(spec["part"] for spec in to_build)


def _register_cuda_unavailable(reason):
    """Without CUDA kernels, a CUDA tensor gets an error that says why rather than torch's generic one."""
    library = torch.library.Library(NAMESPACE, "IMPL")

    def unavailable(*args, **kwargs):
        raise RuntimeError(f"activations: CUDA kernels are not available: {reason}")

    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith(f"{NAMESPACE}::"):
            library.impl(schema.name.split("::")[1], unavailable, "CUDA")
    return library


def load(cuda_arch=None, cpu_only=None):
    """Build (or find in the cache) and load the operators. Returns a description of what was loaded."""
    plan = build_plan(cuda_arch, cpu_only)
    sources = kernel_sources()
    if plan["cuda_archs"]:
        try:
            libraries, compiled = _build_or_load(plan, sources)
            return {"libraries": libraries, "compiled": compiled, "cuda": True, **plan}
        except BuildError as error:
            # Only a library with CUDA code in it can succeed without. The failed build loaded nothing, so the CPU
            # build registers the operators afresh; an error in the C++ units fails it too, and that error is raised.
            if not error.spec["cuda"]:
                raise
            warnings.warn(f"{error}\nactivations: falling back to the CPU kernels only.")
            plan = {**plan, "cuda_archs": (), "no_cuda_reason": f"the CUDA build failed: {str(error).splitlines()[0]}"}
    libraries, compiled = _build_or_load(plan, sources)
    return {"libraries": libraries, "compiled": compiled, "cuda": False, **plan}


def _loaded_namespace():
    """The operators of an already loaded build in this process (a second import, or a generated file run
    beside the module), else None."""
    try:
        return torch.ops.activations.relu.default if hasattr(torch.ops.activations, "relu") else None
    except (AttributeError, RuntimeError):
        return None


def _cli_arguments(argv):
    import argparse

    parser = argparse.ArgumentParser(prog="activations.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="compile the kernels into the cache for this machine")
    choice = build.add_mutually_exclusive_group()
    choice.add_argument("--cuda-arch", help="compile CUDA kernels for these archs (e.g. 9.0 or 8.0;9.0), GPU or not")
    choice.add_argument("--cpu-only", action="store_true", help="compile the CPU kernels only")
    bench = commands.add_parser("kernelbench", help="write a self-contained KernelBench source file")
    bench.add_argument("problem", choices=[row.kernelbench.problem for row in [*OPS.values(), *REDUCTIONS.values()]
                                           if row.kernelbench])
    bench.add_argument("-o", "--output", help="output path (default: kernelbench_<problem>.py)")
    return parser.parse_args(argv)


# Run as a script, the command line is read before the build below, so `build --cuda-arch` compiles only
# what it asks for.
_CLI = _cli_arguments(sys.argv[1:]) if globals().get("__name__") == "__main__" else None
if _CLI is not None and _CLI.command == "kernelbench" and _EMBEDDED_SOURCES is not None:
    sys.exit(f"activations: {sys.argv[0]} is a generated KernelBench file; generate others with "
             "`python activations.py kernelbench NAME` beside kernels/")
if _CLI is not None and _CLI.command == "build":
    if _CLI.cuda_arch:
        os.environ["ACTIVATIONS_CUDA_ARCH"] = _CLI.cuda_arch
        if not build_plan()["cuda_archs"]:
            sys.exit(f"activations: cannot build CUDA kernels: {build_plan()['no_cuda_reason']}")
    if _CLI.cpu_only:
        os.environ["ACTIVATIONS_CPU_ONLY"] = "1"

# The CPU kernels read ACTIVATIONS_CPU_STREAMING_BYTES themselves (strtoll) and ignore what is not a whole number of
# bytes; a typo there would leave the default threshold without a word.
_streaming_bytes = os.environ.get("ACTIVATIONS_CPU_STREAMING_BYTES")
if _streaming_bytes is not None and not re.fullmatch(r"\s*\+?[0-9]+", _streaming_bytes):
    warnings.warn(f"activations: ACTIVATIONS_CPU_STREAMING_BYTES={_streaming_bytes!r} is not a whole number of bytes;"
                  " it is ignored (the default threshold applies)")

_LOADS_OPERATORS = _loaded_namespace() is None  # else another copy of this module (a generated file) did
if _LOADS_OPERATORS:
    BUILD = load()
    _cuda_unavailable = None if BUILD["cuda"] else _register_cuda_unavailable(BUILD["no_cuda_reason"])
else:
    BUILD = {"libraries": {}, "compiled": [], "cuda": None, "note": "operators were already loaded"}

# ---------------------------------------------------------------------------------------------------------------
# Python API: functions and modules, one of each per row of the op table, with torch's signatures.
#
# Each function calls its operator's raw entry point (OpOverload._op), which skips the Python frame of
# OpOverload.__call__ (0.1-0.4 us of a 3-12 us small call), except when traced (below): dynamo traces OpOverloads
# and would break the graph at a raw entry point (it treats torch.compiler.is_dynamo_compiling() as the constant
# True). Other tracers (make_fx, torch.func's transforms) see the raw call in the dispatcher like any other.
# is_dynamo_compiling costs 50 ns a call here, is_compiling 100 ns (it asks TorchScript too). The functions are
# written out from a template (below) rather than built around *args: binding arguments generically would cost
# more than the call itself at small sizes.

_compiling = torch.compiler.is_dynamo_compiling

# Under torch.compile and torch.export, an elementwise function hands the tracer torch's own function (the row's
# torch_function, or torch's in-place form) instead of our operator, unless FUSE_UNDER_COMPILE is False. Inductor
# (torch.compile's compiler, and AOTInductor's for exported programs) fuses torch's activation into its neighbours
# (a convolution's BatchNorm, a matmul's epilogue) and cannot fuse an operator of ours, which stays a kernel of its
# own with its own pass over memory. So by default a compiled model with ours is torch's compiled model. With our
# operators kept, a compiled CNN step took 6 % more GPU time with relu and 3-14 % less with six other activations
# (docs/performance.md, whole training steps): the flag is the user's choice. What the default changes: traced code
# computes torch's formulas (to torch's accuracy, not ours), saves what torch's derivatives save (not our 1-bit
# mask), and an exported program holds torch's operators (it runs without this module). softmax and log_softmax
# always stay ours: inductor's softmax is off the floor for long rows (docs/performance.md, softmax). Dynamo reads
# the flag when it traces and guards on it: changing it recompiles.
#
# Tracing is told by dynamo (torch.compiler.is_dynamo_compiling: torch.compile, and torch.export's strict mode) or
# by the flag torch.export sets while it runs the Python code itself (its non-strict mode). torch.compiler.
# is_exporting() cannot tell them apart portably: torch 2.11's dynamo folds it to True under torch.compile too.
FUSE_UNDER_COMPILE = True

_compiler = torch.compiler

# A call our operator refuses for its arguments' types goes to torch's function, which gives torch's result or raises
# torch's error:
# - a dtype the kernels lack (integers, bool, complex, quantized; the operators refuse them with a TypeError):
#   torch.relu, relu6 and hardtanh keep integers, sigmoid, tanh and softsign make floats of them, sigmoid, tanh,
#   silu and softsign take complex numbers, the others (and softmax without a floating-point dtype=) refuse these;
# - a layout the kernels lack (sparse, nested in either layout, mkldnn; the operators have no kernel for them and
#   raise NotImplementedError): torch's function runs where torch has a kernel for it (relu and tanh on sparse
#   tensors, every one on nested tensors of the jagged layout, as torch's nn.MultiheadAttention and variable-length
#   transformers hand them), else raises torch's error;
# - an input that is not a tensor, or a parameter of another type than the schema's (a list for a number, None for
#   a string), where the operator's schema raises a RuntimeError and torch's function the TypeError that code
#   written for torch catches.
# The try costs nothing until the operator raises (from Python 3.11 on; a few ns before). Traced (with
# FUSE_UNDER_COMPILE False), where a call cannot be tried, _operator_takes picks torch's function beforehand.
_KERNEL_DTYPES = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))
_REFUSALS = (TypeError, RuntimeError, NotImplementedError)  # what the operators raise for what they lack


def _kernels_take(input):
    """Whether the kernels take input: a dense strided tensor (not sparse, nested or mkldnn)."""
    return isinstance(input, torch.Tensor) and input.layout == torch.strided and not input.is_nested


def _operator_takes(name, input, *params):
    """Whether our operator `name` takes these arguments by their types: a dense tensor of a dtype the kernels have,
    a number for each numeric parameter and a string for each choice (gelu's approximate)."""
    row = OPS[name]
    return (_kernels_take(input) and input.dtype in _KERNEL_DTYPES
            and all(isinstance(value, str if param.name in row.choices else numbers.Number)
                    for param, value in zip(row.params, params)))


_FUNCTION = """
def {name}(input{signature}{inplace_parameter}):
    \"\"\"{doc}\"\"\"
{inplace_branch}    if type(input) is not _Tensor and _is_dtensor(input):
        return _on_dtensor({name}, input{call})
    if _compiling() or _compiler._is_exporting_flag:
        if FUSE_UNDER_COMPILE or not _operator_takes({name!r}, input{values}):
            return _torch_functions[{name!r}](input{call})
        return _ops.{name}.default(input{call})
    try:
        return _ops_raw[{name!r}](input{call})
    except _REFUSALS:
        if _operator_takes({name!r}, input{values}):
            raise
    return _torch_functions[{name!r}](input{call})  # outside the except: torch's error is not chained to ours
"""

_INPLACE_FUNCTION = """
def {name}_(input{signature}):
    \"\"\"{name} in place, as torch's; returns input.\"\"\"
    if type(input) is not _Tensor and _is_dtensor(input):
        return input.copy_(_on_dtensor({name}, input{call}))
    if _compiling() or _compiler._is_exporting_flag:
        if FUSE_UNDER_COMPILE or not _operator_takes({name!r}, input{values}):
            _torch_functions[{name!r} + "_"](input{call})
        else:
            _ops.{name}_.default(input{call})
        return input
    try:
        _ops_raw[{name!r} + "_"](input{call})
        return input
    except _REFUSALS:
        if _operator_takes({name!r}, input{values}):
            raise
    _torch_functions[{name!r} + "_"](input{call})
    return input
"""

_MODULE = """
class {cls}(torch.nn.{cls}):
    \"\"\"torch.nn.{cls} running our kernels (a subclass: isinstance checks and state dicts keep working).\"\"\"

    def forward(self, input):
{forward}"""


def _python_sources(row):
    """The source of a row's function, in-place function and module."""
    signature, call, values, attributes = "", "", "", ""
    for param in row.params:
        values += f", {param.name}"
        if param.keyword_only and "*" not in signature:
            signature += ", *"
        signature += f", {param.name}={param.default!r}"
        call += f", {param.name}={param.name}" if param.keyword_only else f", {param.name}"
        attributes += f", {param.name}=self.{param.name}" if param.keyword_only else f", self.{param.name}"
    flag = row.inplace == "flag"
    what = {"mask": "a 1-bit mask per element", "input": "its input", "output": "its output"}[row.saves]
    doc = f"{row.name} elementwise, as torch's {row.torch_function.__name__.lstrip('_')}; the backward keeps {what}."
    sources = _FUNCTION.format(
        name=row.name, signature=signature, doc=doc, call=call, values=values,
        inplace_parameter=", inplace=False" if flag else "",
        inplace_branch=f"    if inplace:\n        return {row.name}_(input{call})\n" if flag else "",
    )
    if row.inplace:
        sources += _INPLACE_FUNCTION.format(name=row.name, signature=signature, call=call, values=values)
    # The module calls the in-place function as a statement and returns its input, which TorchScript can compile too:
    # there the functions are the operators (see TorchScript below), and an in-place operator returns nothing.
    forward = f"        return {row.name}(input{attributes})\n"
    if flag:
        forward = (f"        if self.inplace:\n            {row.name}_(input{attributes})\n            return input\n"
                   + forward)
    sources += _MODULE.format(cls=row.torch_module.__name__, forward=forward)
    return sources


def _torch_inplace_function(row):
    """torch's in-place form of a row's activation, called as f(x, *params): torch.<name>_ for rows whose in-place
    form is a function of its own (sigmoid_, tanh_), else torch.nn.functional.<name>(..., inplace=True)."""
    if row.inplace == "function":
        return getattr(torch, row.name + "_")
    return functools.partial(getattr(F, row.name), inplace=True)


# DTensor (torch.distributed.tensor: tensor and sequence parallelism hand activations DTensors). DTensor runs an
# operator on each rank's shard only where it has a sharding rule for it, and has none for ours; so a function
# given a DTensor runs itself on the local shard (forward, and backward through DTensor's to_local and from_local)
# and returns a DTensor with the input's mesh and placements, as DTensor does for torch's pointwise ops. First, as
# DTensor does for those, a Partial placement (a sum still to be taken, of which a nonlinear function is not the
# sum of the parts) is made Replicate, and so is a shard of softmax's reduced dim. The in-place functions compute
# out of place and copy into x. `type(x) is not _Tensor` keeps the test to one comparison for plain tensors.
# DTensor's in-place ops do not count a version on the shard itself, so autograd could not tell that a saved shard
# of x (or of the result) was changed in place after the forward: where the backward keeps the input or the output,
# it keeps a copy of the shard of its own (one more pass over the shard, only while autograd records).
_Tensor = torch.Tensor


def _is_dtensor(x):
    tensor_module = sys.modules.get("torch.distributed.tensor")  # not imported: x cannot be a DTensor
    return tensor_module is not None and isinstance(x, tensor_module.DTensor)


def _on_dtensor(function, x, *args, reduced_dim=None, **kwargs):
    """function(x, *args, **kwargs) for a DTensor x, shard by shard (see above)."""
    from torch.distributed.tensor import DTensor, Replicate

    if reduced_dim is not None:
        reduced_dim %= max(x.dim(), 1)
    placements = tuple(Replicate() if p.is_partial() or (reduced_dim is not None and p.is_shard(reduced_dim)) else p
                       for p in x.placements)
    if placements != tuple(x.placements):
        x = x.redistribute(x.device_mesh, placements)
    local = x.to_local()
    saves = OPS[function.__name__].saves if function.__name__ in OPS else "output"  # softmax's keep the output
    recorded = torch.is_grad_enabled() and local.requires_grad
    result = function(local.clone() if recorded and saves == "input" else local, *args, **kwargs)
    if recorded and saves == "output":
        result = result.clone()
    # The global strides, as torch's own function gives them: an elementwise op's result dense in x's memory order
    # (empty_like's strides: x's own where x is dense), softmax's contiguous.
    if function.__name__ in OPS:
        stride = torch.empty_like(torch.empty_strided(x.shape, x.stride(), device="meta")).stride()
    else:
        stride = torch.empty(x.shape, device="meta").stride()
    return DTensor.from_local(result, x.device_mesh, placements, run_check=False, shape=x.shape, stride=stride)


def _define(source, name):
    """Run generated source in this module's namespace under a file name of its own, whose lines linecache holds:
    inspect.getsource finds them there, and TorchScript reads a module's forward through it."""
    filename = f"<activations: generated {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), globals())


_ops = torch.ops.activations
_ops_raw = {}  # operator name -> its raw entry point
_torch_functions = {}  # operator name -> torch's function that compiled code calls instead (FUSE_UNDER_COMPILE)
for _row in OPS.values():
    for _name in (_row.name, _row.name + "_") if _row.inplace else (_row.name,):
        _ops_raw[_name] = getattr(_ops, _name).default._op
    _torch_functions[_row.name] = _row.torch_function
    if _row.inplace:
        _torch_functions[_row.name + "_"] = _torch_inplace_function(_row)
    _define(_python_sources(_row), _row.name)

swish = silu  # the name KernelBench (problem 25) and others use


def _implicit_softmax_dim(x: torch.Tensor) -> int:
    """torch's legacy choice of dim when none is given (torch.nn.functional._get_softmax_dim), with its warning.
    Written so that TorchScript compiles it (the modules below call it). Not the warning under dynamo, which cannot
    trace warnings.warn and would refuse torch.compile(fullgraph=True) of a model with Softmax() (torch's F.softmax
    goes into the graph whole)."""
    if not torch.compiler.is_dynamo_compiling():
        warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X as "
                      "an argument.", stacklevel=3)
    return 0 if x.dim() == 0 or x.dim() == 1 or x.dim() == 3 else 1


# ONNX has no operators of ours. torch.onnx.export's default exporter (dynamo=True) captures the model with
# torch.export, where the elementwise functions hand it torch's own already (FUSE_UNDER_COMPILE); softmax and
# log_softmax hand it torch's while it exports in non-strict mode (its first way; in strict mode, under dynamo, the
# question reads False and the export fails, naming our operator). Its TorchScript-based exporter (dynamo=False)
# traces with torch.jit.trace: see the Tracer kernels below.
def _onnx_exporting():
    """Whether torch.onnx.export is running (torch.onnx is imported by those who call it, not by torch)."""
    onnx = sys.modules.get("torch.onnx")
    return onnx is not None and onnx.is_in_onnx_export()


def _reduction(name, input, dim, dtype):
    """softmax or log_softmax (name) of input over dim, once dim is known."""
    if type(input) is not _Tensor and _is_dtensor(input):
        return _on_dtensor(globals()[name], input, dim, dtype, reduced_dim=dim)
    if _compiling():
        return getattr(_ops, name).default(input, dim, dtype)
    if _compiler._is_exporting_flag and _onnx_exporting():
        return REDUCTIONS[name].torch_function(input, dim, dtype=dtype)
    if type(dim) is bool:  # the operator's int would take True as 1: torch's function raises its TypeError
        return REDUCTIONS[name].torch_function(input, dim, dtype=dtype)
    try:
        return _ops_raw[name](input, dim, dtype)
    except _REFUSALS:
        # With a floating-point dtype= the kernels take any input dtype, converted first.
        takes_input = _kernels_take(input) and (dtype is not None or input.dtype in _KERNEL_DTYPES)
        if takes_input and isinstance(dim, numbers.Integral) and (dtype is None or dtype in _KERNEL_DTYPES):
            raise
    return REDUCTIONS[name].torch_function(input, dim, dtype=dtype)


def softmax(input, dim=None, dtype=None):
    """softmax over dim, as torch.softmax: exp(x - max) / sum(exp(x - max)) of x, the input converted to dtype
    first when one is given (16-bit types computed in float). The backward keeps the output."""
    return _reduction("softmax", input, _implicit_softmax_dim(input) if dim is None else dim, dtype)


def log_softmax(input, dim=None, dtype=None):
    """log_softmax over dim, as torch.log_softmax: (x - max) - log(sum(exp(x - max))) of x, the input converted to
    dtype first when one is given. The backward keeps the output."""
    return _reduction("log_softmax", input, _implicit_softmax_dim(input) if dim is None else dim, dtype)


# The modules resolve an implicit dim themselves: in TorchScript the functions are the operators, which need one.
class Softmax(torch.nn.Softmax):
    """torch.nn.Softmax running our kernels (a subclass: isinstance checks and state dicts keep working)."""

    def forward(self, input):
        return softmax(input, self.dim if self.dim is not None else _implicit_softmax_dim(input))


class LogSoftmax(torch.nn.LogSoftmax):
    """torch.nn.LogSoftmax running our kernels (a subclass: isinstance checks and state dicts keep working)."""

    def forward(self, input):
        return log_softmax(input, self.dim if self.dim is not None else _implicit_softmax_dim(input))


for _name in REDUCTIONS:
    _ops_raw[_name] = getattr(_ops, _name).default._op

# TorchScript (torch.jit.script, deprecated by torch but still how some models are deployed) cannot compile the
# functions above (they consult the tracer flags and call raw entry points). It is told instead that each function is
# its operator, as it is told for torch's own functions, so that scripted code (our modules' forwards, a user's
# function) calls the operator: the same kernels, its autograd, no Python. What differs there: an in-place function
# returns nothing (the modules call them as statements), the elementwise ones take no `inplace` (the modules branch
# themselves), softmax and log_softmax need a dim, and FUSE_UNDER_COMPILE does not apply. A scripted model saved with
# torch.jit.save needs this module imported where it is loaded, for its operators.
if hasattr(torch.jit, "_builtins") and hasattr(torch.jit._builtins, "_register_builtin"):
    for _name in _ops_raw:
        torch.jit._builtins._register_builtin(globals()[_name], f"activations::{_name}")

# torch.jit.trace records torch's operators where the traced code calls ours, so that torch.onnx.export's
# TorchScript-based exporter (dynamo=False), which traces with it, finds operators it can translate: with ours it
# failed on every op but the in-place ones, which it dropped from the graph without a word (they return nothing, so
# the graph's output did not depend on them). A kernel on the Tracer dispatch key, which only a jit trace turns on
# (calls outside a trace never reach it), calls torch's function, whose own Tracer kernel records it: a traced model
# with ours is torch's traced model, and runs without this module. FUSE_UNDER_COMPILE does not apply here.
def _torch_in_place_kernel(torch_function):
    def kernel(x, *args, **kwargs):
        torch_function(x, *args, **kwargs)  # our in-place operators return nothing

    return kernel


def _register_tracer_kernels():
    library = torch.library.Library(NAMESPACE, "IMPL")
    for row in OPS.values():
        library.impl(row.name, row.torch_function, "Tracer")
        if row.inplace:
            library.impl(row.name + "_", _torch_in_place_kernel(_torch_functions[row.name + "_"]), "Tracer")
    for reduction in REDUCTIONS.values():
        library.impl(reduction.name, lambda x, dim, dtype=None, f=reduction.torch_function: f(x, dim, dtype=dtype),
                     "Tracer")
    return library


_tracer_kernels = _register_tracer_kernels() if _LOADS_OPERATORS else None

# torch's module class -> ours, and the constructor arguments that carry over.
_SWAPS = {
    row.torch_module: (globals()[row.torch_module.__name__],
                       [p.name for p in row.params] + (["inplace"] if row.inplace == "flag" else []))
    for row in OPS.values()
}
_SWAPS.update({row.torch_module: (globals()[row.torch_module.__name__], ["dim"]) for row in REDUCTIONS.values()})


def swap_activations(model):
    """Replace every torch.nn activation module inside `model` that the op tables have (ReLU, LeakyReLU, ELU, SELU,
    Sigmoid, Tanh, SiLU, GELU, Hardsigmoid, Softplus, Softsign, Hardtanh, ReLU6, Mish; Softmax, LogSoftmax) in place
    with ours, keeping its arguments (alpha, inplace, ...) and the training flag. Returns [(qualified name, the module it replaced)].
    A module held in several places (one GELU used twice in a Sequential, or under two names) is replaced by one
    module of ours in every place, so the places still share it; each place is listed.
    Subclasses of torch's modules (ours included) are left alone, and so is `model` itself when it is one of them
    (there is no parent to put ours in); hooks registered on a replaced module do not carry over."""
    # Every place first (named_modules and named_children list a shared module once), then the replacements.
    places = [
        (f"{parent_name}.{child_name}" if parent_name else child_name, parent, child_name, child)
        for parent_name, parent in model.named_modules(remove_duplicate=False)
        for child_name, child in parent._modules.items()
        if child is not None and type(child) in _SWAPS
    ]
    replacements = {}  # id of a module of torch's -> ours
    for qualified_name, parent, child_name, child in places:
        if id(child) not in replacements:
            ours, arguments = _SWAPS[type(child)]
            replacements[id(child)] = ours(**{a: getattr(child, a) for a in arguments}).train(child.training)
        setattr(parent, child_name, replacements[id(child)])
    return [(qualified_name, child) for qualified_name, _, _, child in places]


# ---------------------------------------------------------------------------------------------------------------
# KernelBench harness: for each problem the reference Model, our ModelNew, get_inputs and get_init_inputs.

batch_size = 4096
dim = 393216

Problem = collections.namedtuple("Problem", "number reference ours init_inputs")
# problem name -> Problem: torch's reference (KernelBench's expression where it has its own), ours, init inputs
PROBLEMS = {
    row.kernelbench.problem: Problem(row.kernelbench.number, row.kernelbench.reference or row.torch_function,
                                     globals()[row.name], list(row.kernelbench.init_inputs))
    for row in OPS.values()
    if row.kernelbench is not None
}
# KernelBench's softmax problems reduce over dim 1.
PROBLEMS.update({
    row.kernelbench.problem: Problem(row.kernelbench.number, row.kernelbench.reference,
                                     functools.partial(globals()[row.name], dim=1), [])
    for row in REDUCTIONS.values()
})

# The problem the module-level Model/ModelNew/get_inputs/get_init_inputs stand for. A generated KernelBench
# file replaces this line with its own problem.
KERNELBENCH_PROBLEM = "relu"


def kernelbench(problem):
    """The KernelBench harness of one problem: a namespace with Model, ModelNew, get_inputs, get_init_inputs."""
    if problem not in PROBLEMS:
        raise ValueError(f"activations: unknown KernelBench problem {problem!r}; choose from {sorted(PROBLEMS)}")
    _, reference, ours, init_inputs = PROBLEMS[problem]

    class Model(torch.nn.Module):
        """KernelBench reference: torch's own activation. Takes the problem's init inputs (alpha for ELU)."""

        def __init__(self, *params):
            super().__init__()
            self.params = params

        def forward(self, x):
            return reference(x, *self.params)

    class ModelNew(Model):
        """The same problem on our kernels."""

        def forward(self, x):
            return ours(x, *self.params)

    def get_inputs():
        return [torch.randn(batch_size, dim)]

    def get_init_inputs():
        return list(init_inputs)

    return types.SimpleNamespace(
        problem=problem, Model=Model, ModelNew=ModelNew, get_inputs=get_inputs, get_init_inputs=get_init_inputs
    )


_harness = kernelbench(KERNELBENCH_PROBLEM)
Model, ModelNew, get_inputs, get_init_inputs = (
    _harness.Model,
    _harness.ModelNew,
    _harness.get_inputs,
    _harness.get_init_inputs,
)


def kernelbench_source(problem):
    """A self-contained KernelBench source for problem: this module with the kernel sources embedded."""
    kernelbench(problem)  # validates the name
    try:
        module_file = os.path.abspath(__file__)
    except NameError:
        raise RuntimeError("activations: generate KernelBench files from activations.py, not from a generated file")
    with open(module_file, encoding="utf-8") as f:
        text = f.read()
    replacements = {
        r"^_EMBEDDED_SOURCES = None$": f"_EMBEDDED_SOURCES = {json.dumps(kernel_sources(), indent=1)}",
        r'^KERNELBENCH_PROBLEM = "relu"$': f"KERNELBENCH_PROBLEM = {json.dumps(problem)}",
    }
    for pattern, replacement in replacements.items():
        text, count = re.subn(pattern, lambda _: replacement, text, count=1, flags=re.MULTILINE)
        if count != 1:
            raise RuntimeError(f"activations: could not find {pattern!r} in {module_file}")
    header = (
        f"# KernelBench problem '{problem}': generated by `python activations.py kernelbench {problem}` from\n"
        "# activations.py and kernels/. Self-contained: executing it compiles the embedded kernel sources with\n"
        "# load_inline (cached like the module's own build). Defines Model, ModelNew, get_inputs, get_init_inputs.\n"
    )
    return header + text


# ---------------------------------------------------------------------------------------------------------------
# Command line


def main(args):
    if args.command == "build":
        print(f"activations: {'CPU + CUDA' if BUILD['cuda'] else 'CPU'} kernels ready: "
              + ", ".join(BUILD["libraries"].values()))
        if not BUILD["cuda"]:
            print(f"activations: no CUDA kernels: {BUILD['no_cuda_reason']}")
        return 0
    output = args.output or f"kernelbench_{args.problem}.py"
    source = kernelbench_source(args.problem)  # before the file is opened: no empty file where this fails
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(source)
    except OSError as error:
        sys.exit(f"activations: cannot write {output}: {error.strerror or error}")
    print(f"activations: wrote {output}")
    return 0


if _CLI is not None:
    sys.exit(main(_CLI))
