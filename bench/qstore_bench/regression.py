"""Seed 002's models: fitted with statsmodels' formula API (the seed's R
formula, ``y ~ writers + I(writers**2) + batch + I(batch**2)``), printed
the way R's ``summary(lm)`` prints them, and the optima of a fitted surface
found with scipy.optimize: bounded on the grid, and unbounded to tell an
optimum on the grid's edge (an extrapolation) from one inside it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd  # type: ignore[import-untyped, unused-ignore]
import statsmodels.formula.api as smf  # type: ignore[import-untyped, unused-ignore]
from scipy import optimize  # type: ignore[import-untyped, unused-ignore]

# R's print width and summary.lm's digits (max(3, getOption("digits") - 3))
WIDTH = 80
DIGITS = 4
# R prints p values below the machine epsilon as "<2e-16"
P_FLOOR = 2e-16


def r_name(term: str) -> str:
    """statsmodels' term name as R spells it: (Intercept), I(x^2)."""
    return "(Intercept)" if term == "Intercept" else term.replace(" ** ", "^").replace("**", "^")


def column(values: Sequence[float], digits: int = DIGITS) -> list[str]:
    """One number format for a whole column, as R's format() gives a
    vector: fixed with the decimals that show `digits` significant digits
    of its smallest nonzero magnitude (at most 8), or scientific for all
    when that needs more."""
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not finite:
        return [f"{v:.0f}" if math.isfinite(v) else str(v) for v in values]
    hi = max(finite)
    # zapsmall: what is below the column's precision is a zero, not a
    # reason for more decimals (a residual of 4e-10 beside 267)
    lo = min((v for v in finite if v >= hi * 10.0 ** -(digits + 1)), default=hi)
    decimals = max(0, digits - 1 - math.floor(math.log10(lo)))
    if decimals > 8 or hi >= 1e15:
        return [f"{v:.{digits - 1}e}" for v in values]
    return [f"{v:.{decimals}f}" for v in values]


def p_column(ps: Sequence[float]) -> list[str]:
    """Pr(>|t|) in one format: scientific when any is below 1e-4, else fixed;
    below 2e-16 as R writes it."""
    sci = any(p < 1e-4 for p in ps)
    return ["<2e-16" if p < P_FLOOR else f"{p:.2e}" if sci else f"{p:.4f}" for p in ps]


def stars(p: float) -> str:
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else \
        "." if p < 0.1 else " "


def named_vector(labels: Sequence[str], values: Sequence[str], width: int = WIDTH) -> list[str]:
    """A named vector as R prints it: each name right-aligned above its
    value, columns one space apart, wrapped at `width`."""
    w = max(max(len(x) for x in labels), max(len(x) for x in values))
    per_line = max(1, (width + 1) // (w + 1))
    out = []
    for i in range(0, len(values), per_line):
        out.append(" ".join(f"{x:>{w}}" for x in labels[i:i + per_line]))
        out.append(" ".join(f"{x:>{w}}" for x in values[i:i + per_line]))
    return out


def _quantile7(xs: Sequence[float], p: float) -> float:
    """R's quantile(type = 7)."""
    s = sorted(xs)
    h = (len(s) - 1) * p
    i = int(h)
    return s[i] + (s[min(i + 1, len(s) - 1)] - s[i]) * (h - i)


@dataclass
class Fit:
    formula: str                 # as R writes it
    names: list[str]             # R's spelling: (Intercept), I(x^2)
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
    result: Any                  # the statsmodels results

    def predict(self, point: dict[str, float]) -> float:
        return float(self.result.predict(pd.DataFrame([point])).iloc[0])

    def summary(self) -> str:
        """The fit as R's summary(lm) prints it: every residual when the
        residual degrees of freedom are 5 or fewer, their quantiles
        otherwise; the coefficients with one format per column and the
        significance stars; residual standard error, R², adjusted R², F
        and its p value."""
        lines = ["Call:", f"lm(formula = {self.formula})", "", "Residuals:"]
        if self.df_resid > 5:
            qs = column([_quantile7(self.residuals, p) for p in (0, .25, .5, .75, 1)])
            lines += named_vector(["Min", "1Q", "Median", "3Q", "Max"], qs)
        else:
            lines += named_vector([str(i + 1) for i in range(len(self.residuals))],
                                  column(self.residuals))
        cols = [["", *self.names], ["Estimate", *column(self.coef)],
                ["Std. Error", *column(self.se)], ["t value", *(f"{t:.3f}" for t in self.t)],
                ["Pr(>|t|)", *p_column(self.p)]]
        widths = [max(len(x) for x in c) for c in cols]
        lines += ["", "Coefficients:"]
        for i in range(len(self.names) + 1):
            row = [f"{cols[0][i]:<{widths[0]}}"] + [f"{c[i]:>{w}}"
                                                     for c, w in zip(cols[1:], widths[1:])]
            mark = "" if i == 0 else " " + stars(self.p[i - 1])
            lines.append(" ".join(row) + mark)
        fp = "< 2.2e-16" if self.f_p < 2.2e-16 else f"{self.f_p:.4g}"
        lines += ["---", "Signif. codes:  0 '***' 0.001 '**' 0.01 '*' 0.05 '.' 0.1 ' ' 1", "",
                  f"Residual standard error: {self.rse:.4g} on {self.df_resid} degrees of freedom",
                  f"Multiple R-squared:  {self.r2:.4g},  Adjusted R-squared:  {self.adj_r2:.4g}",
                  f"F-statistic: {self.f:.4g} on {self.f_df[0]} and {self.f_df[1]} DF,  "
                  f"p-value: {fp}"]
        return "\n".join(lines)


def ols(formula: str, rows: Sequence[dict[str, float]]) -> Fit:
    """Fit the formula (patsy's spelling, ``y ~ x + I(x**2)``) to the rows
    by least squares.  ValueError when the rows cannot determine every
    coefficient (too few, or a knob with too few distinct values)."""
    data = pd.DataFrame(list(rows))
    model = smf.ols(formula, data)
    k, n = len(model.exog_names), len(data)
    if n <= k:
        raise ValueError(f"{n} observations cannot fit the {k} coefficients of {formula} "
                         f"(it needs at least {k + 1})")
    if np.linalg.matrix_rank(model.exog) < k:
        raise ValueError(f"the observations cannot tell the terms of {formula} apart "
                         f"(collinear: give each variable more distinct values)")
    r = model.fit()
    lhs, rhs = formula.split("~", 1)
    return Fit(
        formula=f"{lhs.strip()} ~ " + " + ".join(r_name(t.strip()) for t in rhs.split("+")),
        names=[r_name(x) for x in r.params.index], coef=[float(x) for x in r.params],
        se=[float(x) for x in r.bse], t=[float(x) for x in r.tvalues],
        p=[float(x) for x in r.pvalues], residuals=[float(x) for x in r.resid],
        rse=math.sqrt(float(r.scale)), df_resid=int(r.df_resid), r2=float(r.rsquared),
        adj_r2=float(r.rsquared_adj), f=float(r.fvalue), f_df=(int(r.df_model), int(r.df_resid)),
        f_p=float(r.f_pvalue), result=r)


def maximize_1d(fn: Callable[[float], float], lo: float, hi: float) -> float:
    """The argument of fn's maximum on [lo, hi] (scipy's bounded scalar
    search, R's optimize(maximum = TRUE)); the ends too, in case fn is not
    unimodal there."""
    if lo == hi:
        return lo
    r = optimize.minimize_scalar(lambda x: -fn(x), bounds=(lo, hi), method="bounded",
                                 options={"xatol": 1e-9 * max(1.0, hi - lo)})
    return max((lo, hi, float(r.x)), key=fn)


def maximize(fn: Callable[[np.ndarray], float], bounds: Sequence[tuple[float, float]],
             starts: Sequence[Sequence[float]]) -> np.ndarray:
    """fn's maximum within the box (L-BFGS-B from each start, the best)."""
    best: Optional[np.ndarray] = None
    for x0 in starts:
        r = optimize.minimize(lambda x: -fn(x), np.asarray(x0, float), method="L-BFGS-B",
                              bounds=bounds)
        if best is None or fn(r.x) > fn(best):
            best = r.x
    assert best is not None
    return best


def unconstrained_maximum(fn: Callable[[np.ndarray], float],
                          x0: Sequence[float], scale: Sequence[float]) -> Optional[np.ndarray]:
    """fn's maximum with no bounds, or None when it has none (the fitted
    surface is not concave: it grows without end in some direction).
    scale: a typical step per coordinate, for the curvature check."""
    r = optimize.minimize(lambda x: -fn(x), np.asarray(x0, float), method="BFGS")
    if not r.success or not np.all(np.isfinite(r.x)):
        return None
    x, h = r.x, np.asarray(scale, float) * 1e-2
    n = len(x)
    hess = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h[i], np.eye(n)[j] * h[j]
            hess[i, j] = (fn(x + ei + ej) - fn(x + ei - ej) - fn(x - ei + ej)
                          + fn(x - ei - ej)) / (4 * h[i] * h[j])
    if not np.all(np.linalg.eigvalsh((hess + hess.T) / 2) < 0):
        return None
    result: np.ndarray = x
    return result
