"""Formulas written in plain text, as a teacher reads them: equations and expressions
(``2x+3=7`` 二x加三等于七, ``3y²-2y+1``, ``f(x)=x²+1`` f x等于x的平方加一), and
chemical formulas and subscripts (``H₂O`` H二O, ``CO₂`` C O二, ``x₁`` x一).

A run of letters, digits and operators is a formula when it says so: a relation (=, <,
≤...), two terms with variables joined by an operator (2a+2b), a variable's power (3y²),
a function applied (f(2)), or a math word before it (面积是4ab). A coefficient is a
number (二x, never 两倍); variables are lowercase or single capitals, so acronyms and
words (COVID-19, F-16, k-means) and a number with its unit (5kg, 45m³, 10m/s) are not
formulas and are left to the other rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.context import alternatives, unit_after
from streaming.text.mathtext import RULE_MATH, read_latex
from streaming.text.readings import read_number
from streaming.text.spans import Spans
from streaming.text.tables import words
from streaming.text.tokens import Token, word
from streaming.text.units import UNITS

_SUPER = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻ⁿ"
_SUB = "₀₁₂₃₄₅₆₇₈₉ₐₑₒₓₙᵢⱼₖₘₜ"
_SUBSCRIPTS = str.maketrans(_SUB, "0123456789aeoxnijkmt")
_ATOM = rf"[A-Za-z0-9.()^'{_SUPER}{_SUB}]"
_OPERATOR = r"(?:<=|>=|[-+−*/×÷·=<>≤≥≠±])"
_FORMULA = re.compile(
    rf"(?<![A-Za-zμΩ°0-9_./]){_OPERATOR}?{_ATOM}+(?:[ \t]?{_OPERATOR}[ \t]?{_ATOM}+)*"
    r"(?![A-Za-z0-9_])"
)
_RELATION = re.compile(r"<=|>=|[=<>≤≥≠]")
_OPERATOR_BETWEEN = re.compile(rf"(?<=[A-Za-z0-9)²³{_SUB}])[ \t]?[-+−*/×÷·][ \t]?(?=[A-Za-z0-9(])")
_LETTERS = re.compile(r"[A-Za-z]+")
_TERM = re.compile(rf"[0-9.]*[A-Za-z][A-Za-z0-9^{_SUPER}{_SUB}]*|\([^()]*\)[{_SUPER}^]")
_FUNCTIONS = frozenset(
    words("sin cos tan cot sec csc log ln lg exp max min abs sqrt arcsin arccos arctan")
)
_NAMED_FUNCTIONS = "sin|cos|tan|cot|arcsin|arccos|arctan|log|ln|lg|exp"
_FUNCTION_CALL = re.compile(rf"(?<![A-Za-z])(?:[fghFGHPφ]'*|{_NAMED_FUNCTIONS})\([^()]{{1,12}}\)")
_POWERED_VARIABLE = re.compile(rf"[A-Za-z)](?:\^|[{_SUPER}])")
_SCIENTIFIC = re.compile(r"[0-9]e[-+]?[0-9]")
_NUMBER_THEN_LETTER = re.compile(r"(?<![A-Za-z0-9.])[0-9]+(?:\.[0-9]+)?(?=[A-Za-zμΩ°])")
# Words that say what follows is math: 面积是4ab, 化简3x², 系数为2a.
_MATH_CUES = words(
    """
    方程 函数 公式 算式 等式 不等式 表达式 代数式 多项式 单项式 因式 化简 展开 求解 解得 计算
    面积 周长 体积 系数 已知 设 若 则 令 得 求 解 当 其中
    """
)
_MATH_CUE = re.compile(rf"(?:{alternatives(_MATH_CUES)})[是为：:\s]{{0,2}}$")


# A letter with digits glued after it (i7, x3) or a capital glued after digits (5G,
# 13700K) names a model, not a variable.
_MODEL_LIKE = re.compile(r"[A-Za-z][0-9]|[0-9][A-Z]")


def _variables_only(formula: str) -> bool:
    """Every letter run is a variable (a lowercase run of up to three, one capital) or a
    function's name: no acronym, no word, no model number."""
    if _MODEL_LIKE.search(_FUNCTION_NAME.sub(" ", formula)):  # lg100 is a formula
        return False
    for run in _LETTERS.findall(formula):
        if run in _FUNCTIONS:
            continue
        if len(run) > 1 and (run in UNITS or run in ("am", "pm")):
            return False  # 5kg-2kg, 10am-6pm
        if len(run) > 3 or (len(run) > 1 and not run.islower()):
            return False
    return True


def _has_unit(text: str, start: int, end: int) -> bool:
    """A number in the formula has a unit of two letters or more (5kg, 45m³, 10m/s)."""
    for number in _NUMBER_THEN_LETTER.finditer(text, start, end):
        unit = unit_after(text, number.end())
        if unit is not None and len(unit) > 1:
            return True
    return False


def _unit_of(text: str, start: int) -> bool:
    """Whether ``text[start:]`` begins with the unit of a number before it ("45 m³")."""
    k = start - 1 if text[start - 1 : start] in (" ", "\t") else start
    return k > 0 and "0" <= text[k - 1] <= "9" and unit_after(text, k) is not None


def _is_formula(text: str, start: int, end: int, before: tuple[str, int]) -> bool:
    formula = text[start:end]
    if not _LETTERS.search(formula) or not _variables_only(formula):
        return False
    if _SCIENTIFIC.search(formula) or _has_unit(text, start, end) or _unit_of(text, start):
        return False
    if _RELATION.search(formula) or _FUNCTION_CALL.search(formula):
        return True
    if all(run in UNITS and run not in "xX" for run in _LETTERS.findall(formula)):
        return False  # mg/kg, m/s: units
    terms = _TERM.findall(formula)
    if _OPERATOR_BETWEEN.search(formula) and len(terms) >= 2:
        return True  # 2a+2b, 3y²-2y+1
    if _POWERED_VARIABLE.search(formula):
        return True  # 3y², x²
    behind, at = before
    return bool(terms) and _MATH_CUE.search(behind, max(0, at - 6), at) is not None


_PRODUCT_SIGN = re.compile(r"(?<=[0-9])[xX](?=[0-9])")
_SUBSCRIPT_RUN = re.compile(f"[{_SUB}]+")
_FUNCTION_ARGUMENT = re.compile(r"(?<![A-Za-z])([fghFGHPφ]'*)\(([^()]{1,12})\)")
_FUNCTION_NAME = re.compile(rf"(?<![A-Za-z\\])({_NAMED_FUNCTIONS})(?![A-Za-z])")
_NUMBER_FRACTION = re.compile(r"(?<![0-9.])([0-9]+)/([0-9]+)(?![0-9.])")


def read_formula(formula: str) -> str:
    """A plain-text formula said: "f(x)=x²+1" -> "f x等于x的平方加一"."""
    formula = _PRODUCT_SIGN.sub("×", formula)
    formula = _SUBSCRIPT_RUN.sub(lambda m: "_{" + m.group().translate(_SUBSCRIPTS) + "}", formula)
    formula = _FUNCTION_ARGUMENT.sub(r"\1 \2", formula)  # f(x): f x, with no pause
    formula = _FUNCTION_NAME.sub(r"\\\1 ", formula)  # sin x, log₂8: LaTeX's \sin, \log
    formula = _NUMBER_FRACTION.sub(r"\\frac{\1}{\2}", formula)  # 4/3 三分之四
    return read_latex(formula)


def formula_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _FORMULA.finditer(text):
        start, end = match.start(), match.end()
        while end > start and text[end - 1] in ". ":
            end -= 1  # a full stop after the formula
        if end > start and _is_formula(text, start, end, spans.lookbehind(start)):
            yield word(start, end, read_formula(text[start:end]), RULE_MATH)


# A chemical formula or a variable with subscripts: H₂O, CO₂, H₂SO₄, Fe₂O₃, x₁, a₁₀.
# Letters and subscripts alternate, so a long word is scanned once (no backtracking).
_SUBSCRIPTED = re.compile(
    rf"(?<![A-Za-z0-9])([0-9]*)((?:[A-Za-z]+[{_SUB}]+)+[A-Za-z]*)(?![A-Za-z0-9])"
)
_ELEMENT = re.compile(rf"[A-Z][a-z]?|[a-z]|[{_SUB}]+")


def subscript_rule(spans: Spans) -> Iterator[Token]:
    """H₂O H二O, CO₂ C O二, x₁ x一: symbols spelled, subscripts read as numbers."""
    for match in _SUBSCRIPTED.finditer(spans.text):
        parts: list[str] = [read_number(match[1])] if match[1] else []
        for element in _ELEMENT.findall(match[2]):
            if element[0] in _SUB:
                sub = element.translate(_SUBSCRIPTS)
                parts.append(read_number(sub) if sub.isdigit() else " ".join(sub))
            else:
                if parts and parts[-1][-1:].isascii() and parts[-1][-1:].isalpha():
                    parts.append(" ")
                parts.append(element)
        yield word(match.start(), match.end(), "".join(parts), RULE_MATH)
