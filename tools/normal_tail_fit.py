"""The coefficients of host_double::normal (kernels/activations.cuh): Phi(-a) = exp(-a^2 / 2) t S(t) for a >= 0,
with t = 1 / (1 + P a) and S(t) = Phi(-a) exp(a^2 / 2) / t, a smooth function of t on [1 / (1 + 38.7 P), 1] (past
38.7, Phi(-a) rounds to 0 in float64). S is fitted on the whole of that range by one polynomial of degree DEG in
u = t - c (c the middle of the range, rounded to double): the Chebyshev interpolant at DEG + 1 nodes in 60-digit
arithmetic (mpmath, which torch installs), converted to monomials. P is taken as the double nearest to it, which
the evaluation uses. Prints the C++ constants (the constant term in two parts: the evaluation carries the second),
the fit's largest relative error over 4000 points, and what the rounding of the evaluation is magnified by: the
largest sum of |c_k u^k| over k >= 1, relative to S.

    python tools/normal_tail_fit.py [P 0.2] [DEG 23]
"""
import sys
from math import comb

import mpmath as mp

mp.mp.dps = 60
A_MAX = mp.mpf("38.7")


def s_of_t(t, p):
    a = (1 - t) / (p * t)
    return mp.erfc(a / mp.sqrt(2)) / 2 * mp.exp(a * a / 2) / t


def fit(p, degree):
    """(t's lowest value, center, monomial coefficients in u = t - center, largest relative error, magnification)."""
    t_lo, t_hi = 1 / (1 + p * A_MAX), mp.mpf(1)
    n = degree + 1
    middle, half = (t_hi + t_lo) / 2, (t_hi - t_lo) / 2
    nodes = [mp.cos(mp.pi * (j + mp.mpf(0.5)) / n) for j in range(n)]
    values = [s_of_t(middle + half * x, p) for x in nodes]
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
    worst = magnification = mp.mpf(0)
    for i in range(4001):
        t = t_lo + (t_hi - t_lo) * i / 4000
        u = t - center
        exact = s_of_t(t, p)
        worst = max(worst, abs(mp.polyval(coefficients[::-1], u) / exact - 1))
        magnification = max(magnification, mp.fsum(abs(c * u**k) for k, c in enumerate(coefficients) if k) / exact)
    return t_lo, center, coefficients, worst, magnification


def main():
    p = mp.mpf(float(sys.argv[1]) if len(sys.argv) > 1 else 0.2)
    degree = int(sys.argv[2]) if len(sys.argv) > 2 else 23
    t_lo, center, coefficients, worst, magnification = fit(p, degree)
    print(f"// t in [{float(t_lo):.6f}, 1], degree {degree}: fit within 2^{float(mp.log(worst, 2)):.1f}, the"
          f" rounding magnified up to {float(magnification):.2f} times")
    print(f"constexpr double kNormalScale = {float(p)!r}, kNormalCenter = {float(center)!r};")
    low = coefficients[0] - mp.mpf(float(coefficients[0]))
    print(f"constexpr double kNormalConstantLo = {float(low)!r};")
    print("constexpr double kNormal[] = {" + ", ".join(repr(float(c)) for c in coefficients) + "};")


if __name__ == "__main__":
    main()
