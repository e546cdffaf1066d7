"""The coefficients of host_double::normal (kernels/activations.cuh): Phi(-a) = exp(-a^2 / 2) t S(t) for a >= 0,
with t = 1 / (1 + a / 2) and S(t) = Phi(-a) exp(a^2 / 2) / t, a function of t that stays between 0.2 and 0.5 on
the whole of a in [0, 38.7] (past 38.7, Phi(-a) rounds to 0 in float64). S is fitted on two pieces of a, [0, SPLIT]
and [SPLIT, 38.7], by polynomials of degree DEG in u = t - c (c the middle of the piece's t, rounded to double):
the Chebyshev interpolant at DEG + 1 nodes in 60-digit arithmetic (mpmath, which torch installs), converted to
monomials. Prints the C++ arrays (the constant term in two parts: the evaluation carries the second) and, for each
piece, the fit's largest relative error over 4000 points, and checks what the evaluation assumes of the pieces:
|S(u) - c0| <= |c0|, so that its last step may add c0 by Fast2Sum.

    python tools/normal_tail_fit.py [SPLIT 2.75] [DEG 19]
"""
import sys
from math import comb

import mpmath as mp

mp.mp.dps = 60
A_MAX = mp.mpf("38.7")


def s_of_t(t):
    a = 2 * (1 - t) / t
    return mp.erfc(a / mp.sqrt(2)) / 2 * mp.exp(a * a / 2) / t


def fit(t_lo, t_hi, degree):
    """(center, monomial coefficients in u = t - center, largest relative error) of the interpolant on [t_lo, t_hi]."""
    n = degree + 1
    middle, half = (t_hi + t_lo) / 2, (t_hi - t_lo) / 2
    nodes = [mp.cos(mp.pi * (j + mp.mpf(0.5)) / n) for j in range(n)]
    values = [s_of_t(middle + half * x) for x in nodes]
    cheb = [2 * mp.fsum(values[j] * mp.cos(mp.pi * k * (j + mp.mpf(0.5)) / n) for j in range(n)) / n for k in range(n)]
    cheb[0] /= 2
    # T_k(x) as monomials in x (x = (t - middle) / half), then in u = t - center with center = middle rounded.
    powers = [[mp.mpf(0)] * n for _ in range(n)]
    powers[0][0] = mp.mpf(1)
    if n > 1:
        powers[1][1] = mp.mpf(1)
    for k in range(2, n):
        for j in range(n):
            powers[k][j] = (2 * powers[k - 1][j - 1] if j else 0) - powers[k - 2][j]
    in_middle = [mp.fsum(cheb[k] * powers[k][j] for k in range(n)) / half**j for j in range(n)]
    center = mp.mpf(float(middle))
    shift = middle - center  # t - middle = u - shift
    coefficients = [mp.fsum(in_middle[j] * comb(j, i) * (-shift) ** (j - i) for j in range(i, n)) for i in range(n)]
    worst = mp.mpf(0)
    for i in range(4001):
        t = t_lo + (t_hi - t_lo) * i / 4000
        u = t - center
        value = mp.polyval(coefficients[::-1], u)
        exact = s_of_t(t)
        worst = max(worst, abs(value / exact - 1))
        assert abs(exact - coefficients[0]) <= abs(coefficients[0]), "Fast2Sum's order fails"
    return center, coefficients, worst


def main():
    split = mp.mpf(sys.argv[1]) if len(sys.argv) > 1 else mp.mpf("2.75")
    degree = int(sys.argv[2]) if len(sys.argv) > 2 else 19
    t_split = 1 / (1 + split / 2)
    pieces = {"near": (t_split, mp.mpf(1)), "far": (1 / (1 + A_MAX / 2), t_split)}
    print(f"// a <= {float(split)!r} (the near piece), else the far piece; degree {degree}.")
    for name, (t_lo, t_hi) in pieces.items():
        center, coefficients, worst = fit(t_lo, t_hi, degree)
        print(f"// {name}: t in [{float(t_lo):.6f}, {float(t_hi):.6f}], fit within 2^{float(mp.log(worst, 2)):.1f}")
        print(f"constexpr double k{name.capitalize()}Center = {float(center)!r};")
        print(f"constexpr double k{name.capitalize()}[] = {{" + ", ".join(repr(float(c)) for c in coefficients) + "};")
        low = coefficients[0] - mp.mpf(float(coefficients[0]))
        print(f"constexpr double k{name.capitalize()}ConstantLo = {float(low)!r};")


if __name__ == "__main__":
    main()
