"""Tests for activations: values and gradients against a float64 reference, shapes and layouts, autograd,
modules, the KernelBench harness, the build cache and the generated single-file source.

CPU tests run everywhere. CUDA tests run when a GPU is present and the CUDA kernels were built, and are skipped
with the reason otherwise. Inputs are fresh random draws every run (the seed is in each failure message) mixed
with the special values: +-0.0, +-inf, NaN, subnormals, the smallest normal and the largest finite value.
"""

import math
import os
import random
import shutil
import subprocess
import tempfile
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import activations

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------------------------
# Devices, dtypes, ops

CUDA_REASON = (
    "no CUDA GPU here"
    if not torch.cuda.is_available()
    else f"CUDA kernels not built: {activations.BUILD.get('no_cuda_reason')}"
    if not activations.BUILD.get("cuda")
    else None
)
requires_cuda = pytest.mark.skipif(CUDA_REASON is not None, reason=CUDA_REASON or "")
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


# float64 references: torch's documented formulas, written out with their derivatives. Where torch's own kernels
# disagree with each other, they follow torch's CUDA kernels: relu(-0.0) = +0.0 (torch's CPU relu keeps -0.0),
# and a NaN input takes the x > 0 branch of the derivative (torch's CPU float64 elu backward gives NaN there).
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def reference_relu(x):
    passes = (x > 0) | x.isnan()
    return torch.where(passes, x, torch.zeros_like(x)), passes.to(x.dtype)


def reference_elu(x, alpha=1.0, scale=1.0):
    negative = x <= 0
    value = torch.where(negative, torch.expm1(x) * (alpha * scale), x * scale)
    return value, torch.where(negative, alpha * scale * torch.exp(x), torch.full_like(x, scale))


def reference_selu(x):
    return reference_elu(x, SELU_ALPHA, SELU_SCALE)


# name -> (ours, float64 reference returning (value, derivative), extra arguments)
OPS = {
    "relu": (activations.relu, reference_relu, ()),
    "elu": (activations.elu, reference_elu, ()),
    "elu_alpha_0.3": (activations.elu, reference_elu, (0.3,)),
    "elu_alpha_-0.7": (activations.elu, reference_elu, (-0.7,)),
    "selu": (activations.selu, reference_selu, ()),
}
INPLACE = {"relu": activations.relu_, "elu": activations.elu_, "selu": activations.selu_}
TORCH = {"relu": torch.relu, "elu": F.elu, "selu": torch.selu}


def torch_function(name):
    """torch's function for an OPS name ("elu_alpha_0.3" -> F.elu)."""
    return TORCH[name.split("_")[0]]

# Error bounds in units in the last place of the output dtype, against the exact (float64) result.
# float32 forward: our expm1 (<= 0.88 ulp, activations.cuh) times the coefficient alpha * scale (held as two
# floats, so the product is rounded once): <= 2 ulp. float32 backward: grad * coefficient * expf(x), one more
# rounding and CUDA's expf (<= 2 ulp, its documented bound): <= 3 ulp. float16/bfloat16: computed in float32
# and rounded once: correctly rounded or one ulp off. float64 is compared with torch's own float64 result, so
# the errors of both libms add up.
MAX_ULP = {
    "forward": {torch.float32: 2.0, torch.float16: 1.0, torch.bfloat16: 1.0, torch.float64: 4.0},
    "backward": {torch.float32: 3.0, torch.float16: 1.0, torch.bfloat16: 1.0, torch.float64: 4.0},
}
MANTISSA_BITS = {torch.float32: 23, torch.float64: 52, torch.float16: 10, torch.bfloat16: 7}


def fresh_seed():
    return random.randrange(2**31)


def sample(n, dtype, device, seed):
    """n random values of every sign and magnitude, after the special values."""
    info = torch.finfo(dtype)
    specials = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), info.tiny, -info.tiny, info.max, -info.max,
                info.tiny / 4, -info.tiny / 4, info.eps, -info.eps, 1.0, -1.0]
    g = torch.Generator().manual_seed(seed)
    normal = torch.randn(n, generator=g, dtype=torch.float64) * 3
    exponent = torch.empty(n, dtype=torch.float64).uniform_(-30, 30, generator=g)
    wide = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double() * 2.0**exponent
    values = torch.cat([torch.tensor(specials, dtype=torch.float64), normal, wide])
    return values.to(dtype).to(device)


def ulp_errors(actual, exact):
    """|actual - exact| in ulps of actual's dtype at exact (both finite)."""
    info = torch.finfo(actual.dtype)
    _, exponent = torch.frexp(exact.abs().clamp(min=info.smallest_normal, max=info.max))
    ulp = 2.0 ** (exponent.double() - 1 - MANTISSA_BITS[actual.dtype])
    return (actual.double() - exact).abs() / ulp


def assert_matches(actual, exact, dtype, what, seed):
    """actual (dtype) against the float64 exact result: same NaNs, same infinities, same zeros, and every
    finite value within the dtype's ulp bound for the direction named in `what`. Zero signs are checked for
    values (gradients of zero carry the sign of a product, which torch's kernels do not agree on)."""
    max_ulp = MAX_ULP["backward" if "backward" in what else "forward"][dtype]
    actual, exact = actual.cpu(), exact.cpu().double()
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == exact.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(exact.shape)}"
    nan = exact.isnan()
    assert torch.equal(actual.isnan(), nan), f"{what} (seed {seed}): NaN where the reference is not, or vice versa"
    # Infinite results, and finite ones past the largest finite value that round to infinity; an answer one
    # ulp off there is the largest finite value.
    rounded = exact.to(dtype).double()
    inf = rounded.isinf()
    largest = torch.finfo(dtype).max * rounded[inf].sign()
    got = actual[inf].double()
    assert torch.all((got == rounded[inf]) | ((got == largest) & exact[inf].isfinite())), (
        f"{what} (seed {seed}): infinities differ"
    )
    zero = exact == 0
    assert torch.all(actual[zero] == 0), f"{what} (seed {seed}): nonzero where the result is zero"
    if "backward" not in what:
        assert torch.equal(actual[zero].signbit(), exact[zero].signbit()), f"{what} (seed {seed}): zero signs differ"
    finite = ~nan & ~inf & ~zero
    errors = ulp_errors(actual[finite], exact[finite])
    if errors.numel():
        worst = errors.argmax()
        assert errors.max() <= max_ulp, (
            f"{what} (seed {seed}): {errors.max().item():.2f} ulp off (bound {max_ulp}) at element {worst.item()}: "
            f"got {actual[finite][worst].item()!r}, exact {exact[finite][worst].item()!r}"
        )


def exact_forward_and_gradient(name, x, grad):
    """float64 reference values and input gradient."""
    _, reference, args = OPS[name]
    value, derivative = reference(x.detach().cpu().double(), *args)
    return value, grad.detach().cpu().double() * derivative


def as_bits(t):
    """The raw bits of t, for bit-for-bit comparisons (NaN payloads and zero signs included)."""
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).cpu()


def assert_same_bits(ours, theirs, x, what):
    differ = (as_bits(ours) != as_bits(theirs)).nonzero().flatten()
    assert differ.numel() == 0, (
        f"{what}: {differ.numel()} elements differ from torch, first at {differ[0].item()}: input "
        f"{x.flatten()[differ[0]].item()!r}, ours {ours.flatten()[differ[0]].item()!r} "
        f"(bits {as_bits(ours)[differ[0]].item():#x}), torch's {theirs.flatten()[differ[0]].item()!r} "
        f"(bits {as_bits(theirs)[differ[0]].item():#x})"
    )


def poison_allocator(device, nbytes):
    """Fill freed memory with 0x7f bytes (a huge float32/bfloat16, a NaN in float16) so that an output element a
    kernel never writes shows up as a wrong value, not as a lucky zero."""
    junk = torch.full((nbytes,), 0x7F, dtype=torch.uint8, device=device)
    del junk


# ---------------------------------------------------------------------------------------------------------------
# Values and gradients against float64


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_forward_and_backward_match_float64(name, dtype, device):
    ours, _, args = OPS[name]
    seed = fresh_seed()
    x = sample(4099, dtype, device, seed)  # an odd size: vector body plus a tail
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype).to(device)
    exact_y, exact_grad = exact_forward_and_gradient(name, x, grad)

    poison_allocator(device, 4 * x.numel() * x.element_size())
    x_ = x.clone().requires_grad_()
    y = ours(x_, *args)
    assert y.device == x.device
    assert_matches(y.detach(), exact_y, dtype, f"{name} forward {dtype} {device}", seed)
    poison_allocator(device, 4 * x.numel() * x.element_size())
    (g,) = torch.autograd.grad(y, x_, grad)
    assert_matches(g, exact_grad, dtype, f"{name} backward {dtype} {device}", seed)
    # The inference path (no mask, no saved tensor) gives the same values.
    with torch.no_grad():
        assert torch.equal(as_bits(ours(x, *args)), as_bits(y.detach()))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_cuda_matches_torch_bit_for_bit_where_torch_is_exact(name, dtype):
    """relu is exact: our CUDA results equal torch's bit for bit, but for NaN payloads (torch returns the input's
    NaN, ours the GPU's canonical one). elu/selu: the same NaNs and infinities as torch's CUDA kernels, and values
    within the sum of both error bounds of torch's (ours form alpha * scale exactly; torch rounds it to the
    compute type)."""
    ours, _, args = OPS[name]
    reference = torch_function(name)
    x = sample(10001, dtype, "cuda", fresh_seed()).requires_grad_()
    grad = torch.randn(x.shape, device="cuda").to(dtype)
    y, y_torch = ours(x, *args), reference(x, *args)
    g, g_torch = torch.autograd.grad(y, x, grad)[0], torch.autograd.grad(y_torch, x, grad)[0]
    for what, a, b in (("forward", y.detach(), y_torch.detach()), ("backward", g, g_torch)):
        assert torch.equal(a.isnan(), b.isnan()), f"{what}: NaNs differ from torch's"
        a, b = a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0)
        if name == "relu":
            assert_same_bits(a, b, x, what)
            continue
        assert torch.equal(a.isinf(), b.isinf()) and torch.equal(a[a.isinf()], b[b.isinf()])
        finite = a.isfinite()
        distance = ulp_errors(a[finite].cpu(), b[finite].cpu().double()).max().item()
        assert distance <= 2 * MAX_ULP[what][dtype], f"{what}: {distance:.2f} ulp from torch's result"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["elu", "elu_alpha_0.3", "selu"])
def test_float32_exponentials_across_the_whole_range(name, device):
    """The float32 ELU forward computes expm1 with code of its own on both devices, and the CPU backward exp
    (activations.cuh): check them on a dense, even sweep of float32 itself, every 1024th bit pattern of each sign
    (about 4 million values, both infinities and the subnormals among them), against float64.
    (tools/expm1_exhaustive.cpp checks the expm1 on every float <= 0.)"""
    ours, _, args = OPS[name]
    patterns = torch.arange(0, 2**31, 1024, dtype=torch.int64)
    magnitudes = patterns.to(torch.int32).view(torch.float32)
    x = torch.cat([magnitudes, -magnitudes, torch.tensor([float("inf"), float("-inf"), float("nan")])]).to(device)
    x_ = x.clone().requires_grad_()
    y = ours(x_, *args)
    grad = torch.ones_like(x)
    exact_y, exact_grad = exact_forward_and_gradient(name, x, grad)
    assert_matches(y.detach(), exact_y, torch.float32, f"{name} forward float32 {device} sweep", 0)
    (g,) = torch.autograd.grad(y, x_, grad)
    assert_matches(g, exact_grad, torch.float32, f"{name} backward float32 {device} sweep", 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relu_mask_bits(dtype, device):
    """The forward's saved mask holds, bit i of byte i / 8, whether element i passes its gradient."""
    seed = fresh_seed()
    for n in (1, 7, 8, 9, 31, 33, 1000, 4099):
        x = sample(n, dtype, device, seed)[-n:] if n > 15 else sample(n, dtype, device, seed)[:n]
        poison_allocator(device, 1 << 16)
        y, mask = torch.ops.activations.relu_with_mask(x)
        bits = torch.stack([(mask.cpu() >> k) & 1 for k in range(8)], dim=1).flatten()[:n].bool()
        assert mask.numel() == (n + 7) // 8
        assert torch.equal(bits, ~(x.cpu() <= 0)), f"mask bits wrong for n={n} (seed {seed})"
        assert torch.equal(y.cpu().nan_to_num(), reference_relu(x)[0].cpu().nan_to_num())


# ---------------------------------------------------------------------------------------------------------------
# Shapes and layouts


def layouts(device):
    """name -> input tensor of some shape or memory layout."""
    base = torch.randn(4, 6, 10, device=device)
    return {
        "0-d": torch.tensor(-1.5, device=device),
        "empty": torch.empty(0, device=device),
        "empty-2d": torch.empty(3, 0, device=device),
        "one": torch.randn(1, device=device),
        "odd": torch.randn(4097, device=device),
        "3d": base,
        "transposed": base.transpose(0, 2),
        "step-slice": base[:, ::2, 1::3],
        "expanded": torch.randn(1, 6, device=device).expand(5, 6),
        "misaligned": torch.randn(4097, device=device)[1:],
        "misaligned-odd-length": torch.randn(1001, device=device)[3:1000],
        "channels-last": torch.randn(2, 3, 5, 7, device=device).to(memory_format=torch.channels_last),
        "flipped": torch.flip(base, dims=[1]),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", list(layouts("cpu")))
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_shapes_and_layouts(name, layout, device):
    ours, _, args = OPS[name]
    torch_fn = torch_function(name)
    x = layouts(device)[layout]
    seed = fresh_seed()
    exact_y, exact_grad = exact_forward_and_gradient(name, x, torch.ones_like(x))
    x_ = x.detach().clone(memory_format=torch.preserve_format) if layout != "expanded" else x.detach()
    x_ = x_.requires_grad_() if x_.is_leaf else x_
    y = ours(x_, *args)
    assert y.shape == x.shape
    assert y.stride() == torch_fn(x).stride(), f"output strides {y.stride()}, torch gives {torch_fn(x).stride()}"
    assert_matches(y.detach(), exact_y, x.dtype, f"{name} {layout}", seed)
    if x.numel():
        # A gradient with other strides than the output (here: expanded, as from .sum()).
        (g,) = torch.autograd.grad(y.sum(), x_)
        assert_matches(g, exact_grad, x.dtype, f"{name} {layout} backward", seed)


@requires_cuda
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_more_than_2_to_the_31_elements(name):
    """64-bit indexing: 2^31 + 17 bfloat16 elements, forward and backward, checked at both ends and the middle."""
    ours, _, args = OPS[name]
    n = 2**31 + 17
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    x[: n // 2].fill_(-1.0)
    x[n // 2 :].fill_(2.0)
    x[-5:] = torch.tensor([-3.0, 0.5, -0.25, 4.0, -8.0], dtype=torch.bfloat16)
    x.requires_grad_()
    y = ours(x, *args)
    idx = torch.tensor([0, 1, n // 2 - 1, n // 2, n - 6, n - 5, n - 4, n - 3, n - 2, n - 1], device="cuda")
    exact_y, exact_grad = exact_forward_and_gradient(name, x.detach()[idx], torch.ones(len(idx)))
    assert_matches(y.detach()[idx], exact_y, torch.bfloat16, f"{name} 2^31+17 forward", 0)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    del y
    assert_matches(g[idx], exact_grad, torch.bfloat16, f"{name} 2^31+17 backward", 0)


# ---------------------------------------------------------------------------------------------------------------
# Autograd


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OPS)
def test_gradcheck_float64(name, device):
    ours, _, args = OPS[name]
    x = torch.randn(5, 7, dtype=torch.float64, device=device)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep clear of relu's kink at 0
    assert torch.autograd.gradcheck(lambda t: ours(t, *args), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_and_requires_grad_paths(device):
    x = torch.randn(100, device=device)
    with torch.no_grad():
        assert activations.relu(x.requires_grad_()).grad_fn is None
    y = activations.relu(x)
    assert y.requires_grad and y.grad_fn is not None
    assert activations.elu(torch.randn(3, device=device)).grad_fn is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_inplace_values_and_gradients(name, dtype, device):
    """relu_/elu_/selu_ write the same values in place; their backward works from the output, as torch's does:
    relu's exactly, elu's as grad * (y + alpha * scale) for y <= 0. That formula cancels where elu flattens out,
    so there the error is bounded in absolute terms: one ulp of alpha * scale (in the dtype), times |grad|."""
    _, reference, args = OPS[name]
    seed = fresh_seed()
    x = sample(1001, dtype, device, seed)
    exact_y, _ = exact_forward_and_gradient(name, x, torch.ones_like(x))
    leaf = x.clone().requires_grad_()
    y = leaf.clone()
    assert INPLACE[name](y) is y and y.grad_fn is not None
    assert_matches(y.detach(), exact_y, dtype, f"{name}_ values {device}", seed)
    grad = torch.randn(x.shape, device=device).to(dtype)
    (g,) = torch.autograd.grad(y, leaf, grad)
    # The exact derivative at our output (the saved tensor).
    y64, grad64 = y.detach().cpu().double(), grad.cpu().double()
    coef = {"relu": 0.0, "elu": 1.0, "selu": SELU_ALPHA * SELU_SCALE}[name]
    slope = SELU_SCALE if name == "selu" else 1.0
    if name == "relu":
        derivative = ((y64 > 0) | y64.isnan()).double()
    else:
        derivative = torch.where(y64 <= 0, y64 + coef, torch.full_like(y64, slope))
    exact = grad64 * derivative
    ulp_of_coef = torch.finfo(dtype).eps * max(coef, 1.0)
    error = (g.cpu().double() - exact).abs()
    # An ulp is eps * |value| for normal values and the subnormal spacing (tiny * eps) below them.
    info = torch.finfo(dtype)
    ulp = torch.clamp(info.eps * exact.abs(), min=info.tiny * info.eps)
    bound = MAX_ULP["backward"][dtype] * ulp + ulp_of_coef * grad64.abs()
    assert torch.equal(g.cpu().isnan(), exact.isnan())
    finite = exact.isfinite()
    assert torch.all(error[finite] <= bound[finite]), (
        f"{name}_ backward {dtype} (seed {seed}): worst {(error - bound)[finite].max().item():.3g} past the bound"
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_inplace_autograd_errors_match_torch(name, device):
    leaf = torch.randn(10, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        INPLACE[name](leaf)
    # Overwriting a tensor that an earlier operation saved: its backward must notice.
    a = leaf * 1.0
    b = a * a  # saves a
    INPLACE[name](a)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()
    # Expanded (self-overlapping) tensors cannot be written in place.
    with pytest.raises(RuntimeError, match="more than one element"):
        INPLACE[name](torch.randn(1, 4, device=device).expand(3, 4))


def test_inplace_elu_with_negative_alpha_cannot_backward():
    x = torch.randn(10, requires_grad=True).clone()
    activations.elu_(x, -0.5)
    with pytest.raises(RuntimeError, match="alpha < 0"):
        x.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_inplace_on_non_dense_view(name, device):
    base = torch.randn(6, 8, device=device)
    expected = base.clone()
    exact_y, _ = exact_forward_and_gradient(name, base[:, ::2], torch.ones(6, 4))
    expected[:, ::2] = exact_y.to(device).float()
    INPLACE[name](base[:, ::2])
    torch.testing.assert_close(base, expected)


TORCH_INPLACE = {"relu": torch.relu_, "elu": F.elu_, "selu": torch.selu_}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_inplace_on_a_view_of_a_tensor_that_needs_grad(name, device):
    """Writing into a view rebases the base's history: the gradient reaches the leaf through the view, as with
    torch's in-place ops (values in float64, so both agree to rounding)."""
    x = torch.randn(6, 8, dtype=torch.float64, device=device)
    grads = {}
    for label, inplace in (("ours", INPLACE[name]), ("torch", TORCH_INPLACE[name])):
        leaf = x.clone().requires_grad_()
        base = leaf * 2.0
        inplace(base[:, 1::2])
        (base * torch.arange(48.0, dtype=torch.float64, device=device).view(6, 8)).sum().backward()
        grads[label] = leaf.grad
    torch.testing.assert_close(grads["ours"], grads["torch"])


@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_autograd_graph_rules(name):
    op = OPS[name][0]
    x = torch.randn(20, requires_grad=True)
    y = op(x)
    assert "activations" in y.grad_fn.name()
    # The saved tensors are freed after a backward, as torch's are.
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()
    # retain_graph keeps them: a second backward accumulates the same gradient again.
    x.grad = None
    y = op(x)
    y.sum().backward(retain_graph=True)
    first = x.grad.clone()
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * first)
    # An undefined incoming gradient (the next node returned None for it) gives an undefined gradient, not an
    # error. The pre-hook shows that our node was called with it.
    class DropGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, grad):
            return None

    y = op(x)
    incoming = []
    y.grad_fn.register_prehook(lambda grad_outputs: incoming.append(grad_outputs[0]))
    (g,) = torch.autograd.grad(DropGradient.apply(y).sum() + x.sum(), x)
    assert incoming == [None]
    torch.testing.assert_close(g, torch.ones_like(x))


@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_forward_mode_ad_is_refused_not_ignored(name):
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        dual = fwAD.make_dual(torch.randn(5), torch.randn(5))
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            OPS[name][0](dual)
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            INPLACE[name](dual.clone())


# ---------------------------------------------------------------------------------------------------------------
# Modules


@pytest.mark.parametrize("device", DEVICES)
def test_modules_match_torch_modules(device):
    torch.manual_seed(fresh_seed())
    pairs = [(activations.ReLU(), torch.nn.ReLU()), (activations.ELU(0.5), torch.nn.ELU(0.5)),
             (activations.SELU(), torch.nn.SELU()), (activations.ReLU(inplace=True), torch.nn.ReLU(inplace=True))]
    for ours, theirs in pairs:
        assert isinstance(ours, type(theirs)) and repr(ours) == repr(theirs)
        lin = torch.nn.Linear(16, 16).to(device)
        x = torch.randn(8, 16, device=device, requires_grad=True)
        y1 = torch.nn.Sequential(lin, ours)(x)
        (g1,) = torch.autograd.grad(y1.square().sum(), x)
        y2 = torch.nn.Sequential(lin, theirs)(x)
        (g2,) = torch.autograd.grad(y2.square().sum(), x)
        torch.testing.assert_close(y1, y2)
        torch.testing.assert_close(g1, g2)


# ---------------------------------------------------------------------------------------------------------------
# Errors


def test_bad_inputs_give_clear_errors():
    for dtype in (torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8):
        x = torch.zeros(3, dtype=dtype)
        for name, fn in (("relu", activations.relu), ("elu", activations.elu), ("selu", activations.selu)):
            with pytest.raises(TypeError, match=rf"activations\.{name}: unsupported dtype torch\.{str(dtype)[6:]}"):
                fn(x)
    with pytest.raises(RuntimeError, match="Tensor"):
        activations.relu([1.0, -1.0])
    with pytest.raises(RuntimeError, match="alpha must be a finite number"):
        activations.elu(torch.randn(3), float("nan"))
    with pytest.raises(RuntimeError, match="float"):
        activations.elu(torch.randn(3), "one")


@pytest.mark.skipif(torch.cuda.is_available() or not torch.backends.cuda.is_built() or activations.BUILD["cuda"],
                    reason="needs a CPU-only build of the kernels and a torch that can make a CUDA tensor")
def test_cuda_tensor_without_cuda_kernels_says_why():
    meta = torch.empty(3, device="meta")  # cannot make a real CUDA tensor without a GPU: call the CUDA kernel
    assert activations.relu(meta).shape == (3,)
    with pytest.raises(RuntimeError, match="CUDA kernels are not available: "):
        torch.ops.activations.relu.default.redispatch(torch._C.DispatchKeySet("CUDA"), meta)


# ---------------------------------------------------------------------------------------------------------------
# KernelBench harness


@pytest.mark.parametrize("problem", ["relu", "elu", "selu"])
def test_kernelbench_model_new_matches_model(problem):
    kb = activations.kernelbench(problem)
    assert kb.get_init_inputs() == ([1.0] if problem == "elu" else [])
    model, model_new = kb.Model(*kb.get_init_inputs()), kb.ModelNew(*kb.get_init_inputs())
    x = torch.randn(64, 1000)
    torch.testing.assert_close(model_new(x), model(x), atol=1e-2, rtol=1e-2)


@requires_cuda
@pytest.mark.parametrize("problem", ["relu", "elu", "selu"])
def test_kernelbench_harness_on_gpu_at_full_size(problem):
    kb = activations.kernelbench(problem)
    (x,) = [t.cuda() for t in kb.get_inputs()]
    assert x.shape == (activations.batch_size, activations.dim) == (4096, 393216)
    model, model_new = kb.Model(*kb.get_init_inputs()).cuda(), kb.ModelNew(*kb.get_init_inputs()).cuda()
    out_new = model_new(x)
    out = model(x)
    torch.testing.assert_close(out_new, out, atol=1e-2, rtol=1e-2)


def test_generated_kernelbench_files_run_in_a_fresh_namespace(tmp_path):
    """Each generated file is self-contained: exec'd from another directory in a fresh namespace, it builds (or
    finds cached) the embedded kernels and its ModelNew matches its Model. It can also be imported as a module."""
    for problem in ("relu", "elu", "selu"):
        subprocess.run([sys.executable, os.path.join(HERE, "activations.py"), "kernelbench", problem, "-o",
                        str(tmp_path / f"kb_{problem}.py")], check=True, capture_output=True)
    script = textwrap.dedent("""
        import sys, torch
        for problem in ("relu", "elu", "selu"):
            namespace = {}
            exec(compile(open(f"kb_{problem}.py").read(), f"kb_{problem}.py", "exec"), namespace)
            assert namespace["KERNELBENCH_PROBLEM"] == problem
            init = namespace["get_init_inputs"]()
            model, model_new = namespace["Model"](*init), namespace["ModelNew"](*init)
            x = torch.randn(16, 300)
            torch.testing.assert_close(model_new(x), model(x), atol=1e-2, rtol=1e-2)
        import kb_selu
        assert torch.equal(kb_selu.selu(torch.tensor([1.0])), torch.selu(torch.tensor([1.0])))
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]
    assert not (tmp_path / "kernels").exists()


# ---------------------------------------------------------------------------------------------------------------
# Build and cache


def test_normalize_archs():
    assert activations._normalize_archs("9.0") == ("9.0",)
    assert activations._normalize_archs("8.0;9.0 sm_86 90a") == ("8.0", "8.6", "9.0", "9.0a")
    with pytest.raises(ValueError, match="cannot read CUDA arch"):
        activations._normalize_archs("hopper")


def test_expand_includes_inlines_each_header_once():
    sources = {"a.cuh": "int a;", "b.cuh": '#include "a.cuh"\nint b;', "x.cpp": '#include "a.cuh"\n#include "b.cuh"'}
    text = activations.expand_includes(sources["x.cpp"], sources)
    assert text.count("int a;") == 1 and text.count("int b;") == 1
    with pytest.raises(RuntimeError, match="missing.h"):
        activations.expand_includes('#include "missing.h"', sources)


@pytest.mark.parametrize("part", list(activations.LIBRARIES))
def test_build_key_covers_sources_flags_and_target(part):
    plan = {"cuda_archs": (), "cuda_home": None, "no_cuda_reason": "test"}
    sources = activations.kernel_sources()
    base = activations.build_spec(plan, part, sources)["name"]
    assert activations.build_spec(plan, part, sources)["name"] == base
    changed = dict(sources, **{"activations.cuh": sources["activations.cuh"] + "\n// changed"})
    assert activations.build_spec(plan, part, changed)["name"] != base
    cuda = activations.build_spec({**plan, "cuda_archs": ("9.0",)}, part, sources)["name"]
    other_arch = activations.build_spec({**plan, "cuda_archs": ("8.0",)}, part, sources)["name"]
    if activations.LIBRARIES[part][1] is None:  # no CUDA code: one library serves CPU and CUDA builds
        assert cuda == base == other_arch
    else:
        assert cuda != base and other_arch != cuda


def copy_project(destination):
    shutil.copy(os.path.join(HERE, "activations.py"), destination)
    shutil.copytree(os.path.join(HERE, "kernels"), os.path.join(destination, "kernels"))


def run_python(code, cwd, cache, **env):
    environment = {**os.environ, "ACTIVATIONS_CACHE_DIR": str(cache), **env}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environment, capture_output=True, text=True)


def test_cache_second_import_does_not_compile_and_changed_source_rebuilds(tmp_path):
    copy_project(tmp_path)
    cache = tmp_path / "cache"
    check = "import activations, torch; assert torch.equal(activations.relu(torch.tensor([-1., 2.])), torch.tensor([0., 2.]))"
    first = run_python(check, tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stderr.count("activations: compiled") == 1, first.stderr
    second = run_python(check, tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert second.returncode == 0 and second.stderr == "", second.stderr
    assert not list(cache.glob("*.build-*")), "a build folder was left behind"

    header = tmp_path / "kernels" / "activations.cuh"
    header.write_text(header.read_text() + "\n// a change\n")
    third = run_python(check, tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert third.returncode == 0 and "activations: compiled" in third.stderr, third.stderr
    # Both libraries include the header: each has a new cache entry beside the old one.
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2 * len(activations.LIBRARIES)


@pytest.mark.parametrize("source, build", [("activations.cpp", "cpu"), ("autograd.cpp", "cpu"), ("autograd.cpp", "cuda")])
def test_compile_error_shows_the_compiler_message(tmp_path, source, build):
    """A C++ error in either library ends the import with the compiler's message. In a CUDA build, an error in the
    library without CUDA code is no reason to fall back to a CPU build: that would fail the same way, and
    registering CPU operators beside the CUDA ones loaded already would abort the process."""
    if build == "cuda" and (activations.find_cuda_home() is None or torch.version.cuda is None):
        pytest.skip("needs nvcc and a CUDA build of torch")
    copy_project(tmp_path)
    (part,) = [part for part, (cpp, _) in activations.LIBRARIES.items() if cpp == source]
    broken = tmp_path / "kernels" / source
    broken.write_text(broken.read_text() + "\nthis_is_not_cpp;\n")
    cache = tmp_path / "cache"
    env = {"ACTIVATIONS_CPU_ONLY": "1"} if build == "cpu" else {"ACTIVATIONS_CUDA_ARCH": "9.0"}
    result = run_python("import activations", tmp_path, cache, **env)
    assert result.returncode == 1, result.stderr[-3000:]  # an exception, not a crash
    assert "this_is_not_cpp" in result.stderr and "does not name a type" in result.stderr, result.stderr[-3000:]
    assert "activations.BuildError" in result.stderr and "falling back" not in result.stderr, result.stderr[-3000:]
    assert list(cache.glob(f"activations_{part}_*.log")), "no build log written"
    # The other library compiled fine and may stay in the cache.
    assert not list(cache.glob(f"activations_{part}_*/*.so")), "a failed build left a library in the cache"


@pytest.mark.skipif(activations.find_cuda_home() is None or torch.version.cuda is None,
                    reason="needs nvcc and a CUDA build of torch")
def test_cuda_sources_compile_without_a_gpu(tmp_path):
    """`python activations.py build --cuda-arch 9.0` compiles the CUDA kernels whether or not a GPU is here."""
    copy_project(tmp_path)
    result = subprocess.run([sys.executable, "activations.py", "build", "--cuda-arch", "9.0"], cwd=tmp_path,
                            env={**os.environ, "ACTIVATIONS_CACHE_DIR": str(tmp_path / "cache")},
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CPU + CUDA kernels ready" in result.stdout, result.stdout + result.stderr
    check = ("import torch, activations; assert activations.BUILD['cuda'], activations.BUILD; "
             "assert torch._C._dispatch_has_kernel_for_dispatch_key('activations::relu', 'CUDA')")
    loaded = run_python(check, tmp_path, tmp_path / "cache", ACTIVATIONS_CUDA_ARCH="9.0")
    assert loaded.returncode == 0 and loaded.stderr == "", loaded.stderr[-3000:]


# ---------------------------------------------------------------------------------------------------------------
# torch.compile and opcheck


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["relu", "elu", "selu", "relu_", "elu_", "selu_"])
def test_opcheck(name, dtype, device):
    """Schema, fake/meta kernels, autograd registration and AOT dispatch, as torch.library.opcheck checks them."""
    op = getattr(torch.ops.activations, name).default
    args = (0.5,) if name.startswith("elu") else ()
    for requires_grad in (False, True):
        x = torch.randn(5, 7, dtype=dtype, device=device)
        if name.endswith("_"):
            x = x.requires_grad_(requires_grad).clone() if requires_grad else x
        else:
            x.requires_grad_(requires_grad)
        torch.library.opcheck(op, (x, *args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["relu_backward", "elu_backward", "relu_backward_", "elu_backward_"])
def test_opcheck_backward_operators(name, dtype, device):
    """The backward operators the autograd nodes call, the in-place ones (which write into grad_output) included."""
    op = getattr(torch.ops.activations, name).default
    x = torch.randn(5, 7, dtype=dtype, device=device)
    grad = torch.randn_like(x)
    if name.startswith("relu"):
        args = (grad, torch.ops.activations.relu_with_mask(x)[1])
    else:
        args = (grad, x, 0.5, 1.0, False)
    torch.library.opcheck(op, args)


def profiled_operators(run):
    """Names of our operators that run() calls."""
    with torch.profiler.profile() as profiler:
        run()
    return {event.name for event in profiler.events() if event.name.startswith("activations::")}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["relu", "elu_alpha_0.3", "selu"])
def test_backward_writes_into_a_gradient_nobody_else_holds(name, device):
    """Where autograd hands the backward a gradient that nothing else refers to, the backward writes its result
    into it (the *_backward_ operators) instead of a new tensor; a gradient the caller, a hook or another node
    still holds is left alone. Both ways give the same bits."""
    ours, _, args = OPS[name]
    backward_op = "activations::relu_backward" if name == "relu" else "activations::elu_backward"
    x = sample(999, torch.float32, device, fresh_seed()).requires_grad_()

    def temporary_gradient():  # the gradient of y is (y * 3)'s backward's result, which only autograd holds
        (ours(x, *args) * 3).sum().backward()

    assert backward_op + "_" in profiled_operators(temporary_gradient)
    taken = x.grad
    x.grad = None
    held = torch.full_like(x, 3.0)
    operators = profiled_operators(lambda: torch.autograd.grad(ours(x, *args), x, held))
    assert backward_op in operators and backward_op + "_" not in operators
    assert torch.equal(held, torch.full_like(x, 3.0)), "the caller's gradient was overwritten"
    (given,) = torch.autograd.grad(ours(x, *args), x, held)
    assert torch.equal(as_bits(taken), as_bits(given))

    # A hook that keeps the gradient, and one gradient sent to two nodes (an add's backward).
    kept = []
    x.grad = None
    y = ours(x, *args)
    y.register_hook(kept.append)
    (y * 3).sum().backward()
    assert torch.equal(kept[0], torch.full_like(x, 3.0)), "a gradient a hook kept was overwritten"
    assert torch.equal(as_bits(x.grad), as_bits(given))
    a = x.detach().clone().requires_grad_()
    b = x.detach().clone().requires_grad_()
    ((ours(a, *args) + ours(b, *args)) * 3).sum().backward()
    assert torch.equal(as_bits(a.grad), as_bits(given)) and torch.equal(as_bits(b.grad), as_bits(given))


@requires_cuda
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_training_step_peaks_no_higher_than_torch(name):
    """A layer inside a network: (activation(x) * 2).sum() and its backward, peak memory over what existed before.
    torch's ReLU keeps its output for the backward and its backward allocates the input gradient; ours keeps a
    mask and writes the input gradient into the incoming one: lower. ELU/SELU keep the input either way (it
    exists already): ours writes into the incoming gradient, torch allocates, and both peak in the forward."""
    ours, _, args = OPS[name]
    reference = torch_function(name)
    x = torch.randn(2**22, device="cuda").requires_grad_()
    peaks = []
    for fn in (ours, reference):
        x.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        (fn(x, *args) * 2).sum().backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
    tensor = x.numel() * x.element_size()
    assert peaks[0] <= peaks[1], f"ours peaks at {peaks[0] / tensor:.3f} tensors, torch at {peaks[1] / tensor:.3f}"
    if name == "relu":
        assert peaks[0] < peaks[1] - tensor // 2


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_matches_eager(device):
    torch.manual_seed(fresh_seed())
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), activations.ReLU(), torch.nn.Linear(32, 32), activations.ELU(0.5),
        torch.nn.Linear(32, 32), activations.ReLU(inplace=True), torch.nn.Linear(32, 8), activations.SELU(),
    ).to(device)
    x = torch.randn(4, 16, device=device)
    compiled = torch.compile(model, fullgraph=True)
    y_eager = model(x)
    g_eager = torch.autograd.grad(y_eager.square().sum(), list(model.parameters()))
    torch._dynamo.reset()
    y = compiled(x)
    g = torch.autograd.grad(y.square().sum(), list(model.parameters()))
    torch.testing.assert_close(y, y_eager)
    for a, b in zip(g, g_eager):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_torch_export_keeps_our_operators(strict, device):
    """torch.export traces the functions with dynamo (strict) or with the dispatcher alone (non-strict, where
    the functions take their raw entry point): either way the graph holds our operators and runs like eager."""
    torch.manual_seed(fresh_seed())
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), activations.ReLU(), activations.ELU(0.5),
                                activations.SELU()).to(device)
    x = torch.randn(3, 8, device=device)
    exported = torch.export.export(model, (x,), strict=strict)
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {"activations.relu.default", "activations.elu.default", "activations.selu.default"} <= targets, targets
    torch.testing.assert_close(exported.module()(x), model(x))


# ---------------------------------------------------------------------------------------------------------------
# Swapping torch's activation modules for ours


def small_models(device):
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24),
                              torch.nn.ELU(alpha=0.7, inplace=True), torch.nn.Linear(24, 6), torch.nn.SELU())

    class SmallCNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(inplace=True),
                                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ELU())
            self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10))
            self.act = torch.nn.SELU()

        def forward(self, x):
            return self.act(self.head(self.features(x)))

    # float64: ours and torch's differ in the last bits (see the README's Accuracy), which in float32 can grow past
    # assert_close's tolerance through a layer's sums (a CUDA run saw 1.1e-5 against 1e-5 in a conv weight's
    # gradient); in float64 the same bits stay far below it, so a wrong wiring still shows.
    float64 = dict(device=device, dtype=torch.float64)
    return [(mlp.to(**float64), torch.randn(5, 12, **float64)),
            (SmallCNN().to(**float64).to(memory_format=torch.channels_last),
             torch.randn(2, 3, 6, 6, **float64).to(memory_format=torch.channels_last))]


@pytest.mark.parametrize("device", DEVICES)
def test_swap_activations_keeps_outputs_and_gradients(device):
    torch.manual_seed(fresh_seed())
    for model, x in small_models(device):
        y_before = model(x)
        g_before = torch.autograd.grad(y_before.square().sum(), list(model.parameters()))
        replaced = activations.swap_activations(model)
        assert len(replaced) == 3
        assert all(type(old) in (torch.nn.ReLU, torch.nn.ELU, torch.nn.SELU) for _, old in replaced)
        for name, old in replaced:
            new = model.get_submodule(name)
            assert type(new).__name__ == type(old).__name__ and type(new).__module__ != "torch.nn.modules.activation"
            assert getattr(new, "inplace", None) == getattr(old, "inplace", None)
            assert getattr(new, "alpha", None) == getattr(old, "alpha", None)
        y_after = model(x)
        g_after = torch.autograd.grad(y_after.square().sum(), list(model.parameters()))
        torch.testing.assert_close(y_after, y_before)
        for a, b in zip(g_after, g_before):
            torch.testing.assert_close(a, b)
        assert activations.swap_activations(model) == []  # ours are not swapped again


# ---------------------------------------------------------------------------------------------------------------
# Reliability: devices, streams, graphs


@requires_cuda
def test_gradient_on_another_device_is_refused():
    x = torch.randn(10, device="cuda", requires_grad=True)
    y = activations.elu(x)
    with pytest.raises(RuntimeError, match="device"):
        torch.autograd.grad(y, x, torch.ones(10))
    _, mask = torch.ops.activations.relu_with_mask(x.detach())
    with pytest.raises(RuntimeError, match="saved mask is on cuda"):
        torch.ops.activations.relu_backward(torch.ones(10), mask)


@requires_cuda
@pytest.mark.parametrize("name", ["relu", "elu", "selu"])
def test_cuda_graph_capture_and_replay_match_eager(name):
    ours, _, args = OPS[name]
    x = torch.randn(4099, device="cuda", requires_grad=True)
    grad = torch.randn(4099, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on a side stream, as graph capture requires
        for _ in range(2):
            torch.autograd.grad((ours(x, *args) * grad).sum(), x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = ours(x, *args)
        # The backward's seed is made inside the capture (an outside one ties the capture to the legacy stream).
        (g,) = torch.autograd.grad((y * grad).sum(), x)
    with torch.no_grad():
        x.copy_(torch.randn(4099, device="cuda"))
    graph.replay()
    # Eager results only after the replay. With an eager backward before the capture, this test failed under
    # pytest on torch 2.11 ("would make the legacy stream depend on a capturing blocking stream"), though the
    # same sequence passes in a plain script for torch's ops and ours (tools/graph_probe.py): cause not found.
    expected_y = ours(x, *args)
    (expected_g,) = torch.autograd.grad(expected_y, x, grad)
    torch.cuda.synchronize()
    assert torch.equal(y, expected_y.detach()) and torch.equal(g, expected_g)


@requires_cuda
def test_work_on_a_side_stream_is_ordered():
    """Our kernels run on the current stream: a chain on a side stream sees the producer's results."""
    side = torch.cuda.Stream()
    x = torch.randn(1 << 24, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(10_000_000)  # keep the side stream busy, so that misordering would show
        a = x * 2
        y = activations.selu(a)
        z = activations.relu(y)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(z, torch.relu(torch.selu(x * 2)))


@requires_cuda
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not found")
def test_compute_sanitizer_memcheck_is_clean(tmp_path):
    """Every kernel, odd sizes and misaligned views, under compute-sanitizer's memcheck."""
    script = textwrap.dedent("""
        import torch, activations
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            for n in (1, 3, 8, 17, 1001, 4099):
                for offset in (0, 1, 3):
                    x = torch.randn(n + offset, device="cuda", dtype=dtype)[offset:].requires_grad_()
                    for fn in (activations.relu, activations.elu, activations.selu):
                        y = fn(x)
                        torch.autograd.grad(y, x, torch.randn_like(y))
                    for fn in (activations.relu_, activations.elu_, activations.selu_):
                        fn(x.detach().clone()[:])
        torch.cuda.synchronize()
        print("sanitized")
    """)
    result = subprocess.run(["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "3", sys.executable,
                             "-c", script], cwd=HERE, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "sanitized" in result.stdout, (result.stdout + result.stderr)[-4000:]
    assert "ERROR SUMMARY: 0 errors" in result.stdout, result.stdout[-4000:]


# ---------------------------------------------------------------------------------------------------------------
# Reliability: build and cache faults


def test_build_key_changes_with_the_torch_version(monkeypatch):
    plan = {"cuda_archs": (), "cuda_home": None, "no_cuda_reason": "test"}
    names = {part: activations.build_spec(plan, part)["name"] for part in activations.LIBRARIES}
    monkeypatch.setattr(torch, "__version__", "0.0.1-other")
    for part, name in names.items():
        assert activations.build_spec(plan, part)["name"] != name


def test_cpu_instruction_set_flags_follow_torch(monkeypatch):
    """AVX2 flags only where torch itself runs AVX2 kernels, and they are part of the build key: a machine
    without AVX2 sharing the cache gets its own build rather than an illegal instruction."""
    plan = {"cuda_archs": (), "cuda_home": None, "no_cuda_reason": "test"}
    monkeypatch.setattr(activations.platform, "machine", lambda: "x86_64")
    keys = {}
    for capability in ("DEFAULT", "AVX2", "AVX512"):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
        keys[capability] = activations.build_spec(plan, "ops")["name"]
        assert ("-DACTIVATIONS_CPU_AVX2" in activations.cpu_flags()) == (capability != "DEFAULT")
    assert keys["DEFAULT"] != keys["AVX2"] == keys["AVX512"]
    monkeypatch.setattr(activations.platform, "machine", lambda: "aarch64")
    assert activations.cpu_flags() == []


def cold_build_in(tmp_path):
    """A copy of the project with a fresh cache under tmp_path; returns the cache folder after one CPU build."""
    copy_project(tmp_path)
    cache = tmp_path / "cache"
    result = run_python("import activations", tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert result.returncode == 0, result.stderr[-3000:]
    return cache


def test_corrupted_or_truncated_library_is_rebuilt(tmp_path):
    cache = cold_build_in(tmp_path)
    (library,) = cache.glob("activations_ops_*/*.so")
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 2])
    check = "import activations, torch; assert activations.relu(torch.tensor([-2.0])).item() == 0"
    result = run_python(check, tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert result.returncode == 0 and "activations: compiled" in result.stderr, result.stderr[-3000:]


def test_two_cold_imports_at_once_build_once(tmp_path):
    copy_project(tmp_path)
    cache = tmp_path / "cache"
    code = "import activations, torch; assert activations.selu(torch.tensor([0.0])).item() == 0"
    env = {**os.environ, "ACTIVATIONS_CACHE_DIR": str(cache), "ACTIVATIONS_CPU_ONLY": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[1] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert sum(o.count("activations: compiled") for o in outputs) == 1, outputs


def test_build_killed_halfway_leaves_nothing_half_written(tmp_path):
    import signal
    import time

    copy_project(tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "ACTIVATIONS_CACHE_DIR": str(cache), "ACTIVATIONS_CPU_ONLY": "1"}
    victim = subprocess.Popen([sys.executable, "-c", "import activations"], cwd=tmp_path, env=env,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while not list(cache.glob("*.build-*/*")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # into the compiler
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not list(cache.glob("*/*.so")), "the killed build published a library"
    result = run_python("import activations", tmp_path, cache, ACTIVATIONS_CPU_ONLY="1")
    assert result.returncode == 0 and "activations: compiled" in result.stderr, result.stderr[-3000:]
    assert not list(cache.glob("*.build-*")), "the killed build's folder was not cleaned up"


def test_unwritable_cache_directory(tmp_path):
    copy_project(tmp_path)
    # A path below a regular file can never be created, even by root.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = run_python("import activations", tmp_path, blocker / "cache", ACTIVATIONS_CPU_ONLY="1")
    assert result.returncode != 0
    assert "not-a-directory/cache" in result.stderr and "ACTIVATIONS_CACHE_DIR" in result.stderr, result.stderr[-2000:]
    # Without ACTIVATIONS_CACHE_DIR, an unwritable default falls back to a temporary folder, with a warning.
    env = {k: v for k, v in os.environ.items() if k != "ACTIVATIONS_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(blocker / "xdg"), ACTIVATIONS_CPU_ONLY="1")
    result = subprocess.run([sys.executable, "-c", "import activations; print(activations.BUILD['libraries']['ops'])"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "is not writable" in result.stderr and "ACTIVATIONS_CACHE_DIR" in result.stderr
    assert result.stdout.startswith(tempfile.gettempdir())


def test_failing_nvcc_falls_back_to_cpu_and_says_where_the_log_is(tmp_path):
    copy_project(tmp_path)
    toolkit = tmp_path / "fake-cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: this compiler is broken on purpose' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    check = ("import activations, torch; assert not activations.BUILD['cuda']; "
             "assert activations.relu(torch.tensor([-1.0])).item() == 0; print(activations.BUILD['no_cuda_reason'])")
    result = run_python(check, tmp_path, tmp_path / "cache", CUDA_HOME=str(toolkit), ACTIVATIONS_CUDA_ARCH="9.0")
    if torch.version.cuda is None:
        pytest.skip("this torch has no CUDA support: no CUDA build is attempted")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the CUDA build failed" in result.stdout
    assert "falling back to the CPU kernels" in result.stderr and ".log" in result.stderr, result.stderr[-3000:]
    # The autograd library, built beside the failed CUDA build, serves the CPU build too: loaded once.
    assert "previously registered" not in result.stderr, result.stderr[-3000:]
