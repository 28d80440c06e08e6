"""Ordinary least squares with the statistics R's summary(lm) prints, in
plain Python (no numpy/scipy needed): coefficients, standard errors, t and
p values, R², adjusted R², residual standard error, F statistic.

The p values need the t and F distributions: both come from the
regularized incomplete beta function, evaluated by its continued fraction
(Lentz's method)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| > |t|) for Student's t with df degrees of freedom."""
    if df <= 0 or math.isnan(t):
        return float("nan")
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def f_upper_p(f: float, d1: float, d2: float) -> float:
    """P(F > f) for the F distribution with (d1, d2) degrees of freedom."""
    if f <= 0 or d2 <= 0:
        return 1.0 if f <= 0 else float("nan")
    return betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            raise ValueError("the predictors are collinear (singular X'X)")
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def _inverse(a: list[list[float]]) -> list[list[float]]:
    n = len(a)
    cols = [_solve(a, [1.0 if i == j else 0.0 for i in range(n)]) for j in range(n)]
    return [[cols[j][i] for j in range(n)] for i in range(n)]


@dataclass
class Fit:
    names: list[str]
    coef: list[float]
    se: list[float]
    t: list[float]
    p: list[float]
    residuals: list[float]
    rse: float
    df_resid: int
    r2: float
    adj_r2: float
    f: float
    f_df: tuple[int, int]
    f_p: float
    formula: str
    terms: list[Callable[[dict[str, float]], float]]

    def predict(self, point: dict[str, float]) -> float:
        return sum(c * term(point) for c, term in zip(self.coef, self.terms))

    def summary(self) -> str:
        """The fit as R's summary(lm) prints it."""
        def stars(p: float) -> str:
            return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else \
                "." if p < 0.1 else ""
        w = max(len(n) for n in self.names) + 2
        if len(self.residuals) > 5:   # R shows quantiles then
            s = sorted(self.residuals)

            def q(p: float) -> float:
                h = (len(s) - 1) * p
                i = int(h)
                return s[i] + (s[min(i + 1, len(s) - 1)] - s[i]) * (h - i)
            res = ["    Min      1Q  Median      3Q     Max",
                   " ".join(f"{q(p):>7.4g}" for p in (0, .25, .5, .75, 1))]
        else:
            res = ["  " + "  ".join(f"{r:.4g}" for r in self.residuals)]
        lines = [f"Call:\nlm(formula = {self.formula})", "", "Residuals:", *res, "",
                 "Coefficients:",
                 f"{'':<{w}}{'Estimate':>12}{'Std. Error':>12}{'t value':>9}{'Pr(>|t|)':>10}"]
        for n, c, se, t, p in zip(self.names, self.coef, self.se, self.t, self.p):
            lines.append(f"{n:<{w}}{c:>12.5g}{se:>12.5g}{t:>9.3f}{p:>10.4g} {stars(p)}")
        lines += ["---", "Signif. codes:  0 '***' 0.001 '**' 0.01 '*' 0.05 '.' 0.1 ' ' 1", "",
                  f"Residual standard error: {self.rse:.4g} on {self.df_resid} degrees of freedom",
                  f"Multiple R-squared: {self.r2:.4f}, Adjusted R-squared: {self.adj_r2:.4f}",
                  f"F-statistic: {self.f:.4g} on {self.f_df[0]} and {self.f_df[1]} DF,  "
                  f"p-value: {self.f_p:.4g}"]
        return "\n".join(lines)


def lm(y: Sequence[float], data: Sequence[dict[str, float]], response: str,
       terms: list[tuple[str, Callable[[dict[str, float]], float]]]) -> Fit:
    """Fit y ~ intercept + terms by least squares.  terms: (name, function
    of a data row); the intercept is added."""
    names = ["(Intercept)"] + [n for n, _ in terms]
    fns: list[Callable[[dict[str, float]], float]] = [lambda _: 1.0] + [f for _, f in terms]
    x = [[f(row) for f in fns] for row in data]
    n, k = len(y), len(fns)
    if n <= k:
        raise ValueError(f"{n} observations cannot fit {k} coefficients")
    xtx = [[sum(x[r][i] * x[r][j] for r in range(n)) for j in range(k)] for i in range(k)]
    xty = [sum(x[r][i] * y[r] for r in range(n)) for i in range(k)]
    coef = _solve(xtx, xty)
    fitted = [sum(c * v for c, v in zip(coef, row)) for row in x]
    resid = [a - b for a, b in zip(y, fitted)]
    rss = sum(e * e for e in resid)
    mean = sum(y) / n
    tss = sum((v - mean) ** 2 for v in y)
    df = n - k
    sigma2 = rss / df
    inv = _inverse(xtx)
    se = [math.sqrt(max(0.0, sigma2 * inv[i][i])) for i in range(k)]
    t = [c / s if s > 0 else float("inf") for c, s in zip(coef, se)]
    p = [t_two_sided_p(v, df) for v in t]
    r2 = 1.0 - rss / tss if tss > 0 else 1.0
    adj = 1.0 - (1.0 - r2) * (n - 1) / df
    df1 = k - 1
    f = ((tss - rss) / df1) / sigma2 if sigma2 > 0 and df1 > 0 else float("inf")
    formula = f"{response} ~ " + " + ".join(n for n, _ in terms)
    return Fit(names, coef, se, t, p, resid, math.sqrt(sigma2), df, r2, adj, f, (df1, df),
               f_upper_p(f, df1, df), formula, fns)


def maximize_1d(fn: Callable[[float], float], lo: float, hi: float, tol: float = 1e-6) -> float:
    """The argument of the maximum of fn on [lo, hi] (golden-section search,
    like R's optimize(maximum = TRUE), for a unimodal fn)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = fn(c), fn(d)
    while abs(b - a) > tol * max(1.0, abs(a) + abs(b)):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = fn(d)
    best = (a + b) / 2
    # the ends, in case fn is not unimodal on the interval
    return max((lo, hi, best), key=fn)


def maximize_2d(fn: Callable[[float, float], float], box: tuple[float, float, float, float],
                rounds: int = 30) -> tuple[float, float]:
    """The joint maximum of fn(u, v) on the box [u0, u1] x [v0, v1] by
    coordinate ascent with golden-section steps (exact for the seed's
    separable quadratic; good for smooth unimodal surfaces)."""
    u0, u1, v0, v1 = box
    u, v = (u0 + u1) / 2, (v0 + v1) / 2
    for _ in range(rounds):
        nu = maximize_1d(lambda a: fn(a, v), u0, u1)
        nv = maximize_1d(lambda b: fn(nu, b), v0, v1)
        if abs(nu - u) < 1e-9 and abs(nv - v) < 1e-9:
            u, v = nu, nv
            break
        u, v = nu, nv
    return u, v
