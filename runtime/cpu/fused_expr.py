"""The ops' ``expr`` templates (C-like scalar expressions, shared with the CUDA backend)
translated to Python for the generated numba loops (``fused_numba.py``): ``c_to_python``.
"""
from __future__ import annotations

import re
from typing import List, Tuple

_FUNCS = {"exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "sin": "np.sin",
          "cos": "np.cos", "tanh": "_tanh", "abs": "abs", "max": "_maximum",
          "min": "_minimum", "pow": "_pow", "erf": "math.erf",
          "gelu_tanh": "_gelu_tanh", "gelu_none": "_gelu_none", "tan": "np.tan",
          "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh",
          "cosh": "np.cosh", "asinh": "np.arcsinh", "acosh": "np.arccosh",
          "atanh": "np.arctanh", "log1p": "np.log1p", "expm1": "np.expm1", "log2": "np.log2",
          "log10": "np.log10", "exp2": "np.exp2", "floor": "np.floor", "ceil": "np.ceil",
          "trunc": "np.trunc", "isnan": "np.isnan", "isinf": "np.isinf",
          "isfinite": "np.isfinite", "remainder": "np.remainder", "fmod": "np.fmod",
          "floor_divide": "_floor_divide", "atan2": "np.arctan2", "hypot": "np.hypot",
          "rint": "np.rint"}
_DTYPE_NAMES = {"float16", "float32", "float64", "int32", "int64", "uint8", "bool"}
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|"
                    r"\d+(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|(&&|\|\||==|!=|<=|>=|[-+*/?:!<>(),]))")
_BINARY = {"||": (2, "or"), "&&": (3, "and"), "==": (4, "=="), "!=": (4, "!="),
           "<": (5, "<"), "<=": (5, "<="), ">": (5, ">"), ">=": (5, ">="),
           "+": (6, "+"), "-": (6, "-"), "*": (7, "*"), "/": (7, "/")}


def c_to_python(expr: str, literal: str) -> str:
    """Translate one C-like ``expr`` template (already formatted with operand names) to a
    Python expression for numba; numeric literals become ``literal(x)`` (the compute dtype).

    ``(x0 > 0 ? x0 : x0 * 0.01)`` -> ``(x0 if (x0 > F(0)) else (x0 * F(0.01)))``
    """
    tokens: List[Tuple[str, str]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot translate expr {expr!r} at {expr[pos:]!r}")
        pos = m.end()
        kind = "num" if m.group(1) else "id" if m.group(2) else "op"
        tokens.append((kind, m.group(m.lastindex)))
    tokens.append(("end", ""))
    at = [0]

    def peek(k=0):
        return tokens[at[0] + k]

    def take(want=None):
        tok = tokens[at[0]]
        if want is not None and tok[1] != want:
            raise ValueError(f"cannot translate expr {expr!r}: expected {want!r}")
        at[0] += 1
        return tok

    def primary() -> str:
        kind, text = take()
        if kind == "num":
            return f"{literal}({text})"
        if kind == "id":
            if peek()[1] == "(":
                take("(")
                args = [parse(0)]
                while peek()[1] == ",":
                    take(",")
                    args.append(parse(0))
                take(")")
                if text not in _FUNCS:
                    raise ValueError(f"no numba form for function {text!r}")
                return f"{_FUNCS[text]}({', '.join(args)})"
            return {"inf": f"{literal}(np.inf)", "nan": f"{literal}(np.nan)"}.get(text, text)
        if text == "(":
            if peek()[0] == "id" and peek()[1] in _DTYPE_NAMES and peek(1)[1] == ")":
                dtype = take()[1]
                take(")")
                fn = "np.bool_" if dtype == "bool" else f"np.{dtype}"
                return f"{fn}({unary()})"
            inner = parse(0)
            take(")")
            return f"({inner})"
        raise ValueError(f"cannot translate expr {expr!r}: unexpected {text!r}")

    def unary() -> str:
        text = peek()[1]
        if peek()[0] == "op" and text in ("-", "!"):
            take()
            operand = unary()
            return f"(-{operand})" if text == "-" else f"(not {operand})"
        return primary()

    def parse(min_prec: int) -> str:
        left = unary()
        while True:
            kind, text = peek()
            if kind != "op":
                return left
            if text == "?" and min_prec <= 1:
                take()
                then = parse(0)
                take(":")
                other = parse(1)
                left = f"({then} if {left} else {other})"
                continue
            if text not in _BINARY or _BINARY[text][0] < min_prec:
                return left
            prec, py = _BINARY[text]
            take()
            right = parse(prec + 1)
            left = f"({left} {py} {right})"

    out = parse(0)
    if peek()[0] != "end":
        raise ValueError(f"cannot translate expr {expr!r}: trailing {peek()[1]!r}")
    return out
