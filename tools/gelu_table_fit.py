"""The coefficients of the float32 GELU forward's table on AVX-512 CPUs (kernels/gelu_table_cpu.cpp): Phi(-a), the
normal distribution's lower tail, on 32 pieces of a in [0, 8), piece k = [k / 4, (k + 1) / 4), each a polynomial of
degree 6 in d = a - k / 4 in [0, 1/4). Fitted for relative error (Lawson's iteration on weighted least squares over
Chebyshev points, the function in 40-digit arithmetic by mpmath, which torch installs), the coefficients rounded to
float one at a time from the constant term up, the rest fitted again after each rounding, so that the later ones
absorb what the earlier ones' rounding lost. Prints the C++ table (kPhiTail[j][k]: coefficient j of piece k) and
each piece's largest relative error with its float coefficients (in exact arithmetic: the evaluation's own
rounding comes on top), against float32's 2^-24 = 6.0e-8.

    python tools/gelu_table_fit.py
"""
import mpmath as mp
import torch

mp.mp.dps = 40
PIECES, WIDTH, DEGREE, POINTS = 32, mp.mpf(1) / 4, 6, 300


def relative_fit(basis, target, scale, iterations=80):
    """Coefficients c minimizing max |basis c - target| / scale (Lawson: least squares reweighted by the errors)."""
    weight = torch.full_like(target, 1.0 / len(target))
    for _ in range(iterations):
        root = weight.sqrt() / scale
        c = torch.linalg.lstsq(basis * root[:, None], (target * root)[:, None]).solution[:, 0]
        error = ((basis @ c - target) / scale).abs()
        weight = weight * error + 1e-300
        weight = weight / weight.sum()
    return c


def piece(k):
    """(float coefficients of piece k, their largest relative error)."""
    d = [(1 - mp.cos(mp.pi * (j + mp.mpf(0.5)) / POINTS)) / 2 * WIDTH for j in range(POINTS)] + [mp.mpf(0), WIDTH]
    exact = torch.tensor([float(mp.ncdf(-(k * WIDTH + v))) for v in d], dtype=torch.float64)
    basis = torch.tensor([[float(v) ** j for j in range(DEGREE + 1)] for v in d], dtype=torch.float64)
    rounded = torch.zeros(DEGREE + 1, dtype=torch.float64)
    for j in range(DEGREE + 1):
        rest = exact - basis[:, :j] @ rounded[:j]  # what the rounded coefficients leave
        c = relative_fit(basis[:, j:], rest, exact)
        rounded[j] = c[0].float().double()
    return rounded.float(), ((basis @ rounded - exact) / exact).abs().max().item()


def main():
    fits = [piece(k) for k in range(PIECES)]
    print(f"alignas(64) constexpr float kPhiTail[{DEGREE + 1}][{PIECES}] = {{")
    for j in range(DEGREE + 1):
        values = [f"{c[j].item():.9e}f" for c, _ in fits]
        lines = [", ".join(values[i:i + 4]) for i in range(0, PIECES, 4)]
        print("    {" + ",\n     ".join(lines) + "},")
    print("};")
    for k, (_, error) in enumerate(fits):
        print(f"piece {k:2d}, a in [{k / 4:.2f}, {(k + 1) / 4:.2f}): relative error {error:.3g}")


if __name__ == "__main__":
    main()
