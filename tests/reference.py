"""Reference computations for the tests, independent of attnlab: adaptive 2-D
integration (scipy.integrate.dblquad) and the L = 2 teacher written from its definition."""
import math

import numpy as np
import scipy.integrate


def gauss2(f, var):
    """E[f(h1, h2)] for h ~ N(0, var I_2), by adaptive 2-D integration (independent of attnlab)."""
    s = math.sqrt(var)
    dens = lambda a, b: math.exp(-(a * a + b * b) / (2 * var)) / (2 * math.pi * var)
    val, _ = scipy.integrate.dblquad(lambda b, a: f(a, b) * dens(a, b), -9 * s, 9 * s, -9 * s, 9 * s,
                                     epsabs=1e-12, epsrel=1e-10)
    return val


def T(a, b, omega, A):
    h = np.array([a, b])
    S = np.exp(np.outer(h, h))
    S /= S.sum(axis=1, keepdims=True)
    return (1 - omega) * S + omega * np.asarray(A)
