"""Math as it is said: inline LaTeX (``$E=mc^2$``, ``\\frac{a}{b}``, ``\\sqrt{x}``), powers
(x^2, x², 10^9), roots (√2) and products (1920x1080, 3x3).

``$...$`` is math, never dollars, when what it holds reads as math (a letter, a
backslash, ``^``, ``_`` or ``=``) and no amount follows the closing sign ("$5 and $10"
stays money). Single-letter variables are spelled apart (m c); numbers are read as
numbers, 2 as 二 (x的平方, 二的十次方, 三分之二).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streaming.text.context import unit_after
from streaming.text.readings import read_digits, read_number
from streaming.text.spans import Spans
from streaming.text.symbols import LATEX_COMMANDS, LATEX_DROPPED, LATEX_OPERATORS, SYMBOL_READINGS
from streaming.text.tables import words
from streaming.text.tokens import Token, word
from streaming.text.units import UNITS

RULE_LATEX = "math.latex"
RULE_MATH = "math"

_CONTENT_COMMANDS = frozenset(
    words(
        """
    mathrm text mathbf mathit operatorname textbf textit mathcal mathbb boldsymbol vec hat
    bar overline underline widehat tilde
        """
    )
)
_FRACTIONS = frozenset({"frac", "dfrac", "tfrac", "cfrac"})


class _Latex:
    """A small reader of LaTeX math: a recursive descent over one formula."""

    def __init__(self, source: str) -> None:
        self.s = source
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def parse(self, stop: str = "") -> str:
        parts: list[str] = []
        while self.i < len(self.s) and self.peek() != stop:
            ch = self.peek()
            if ch in "^_" and parts:
                self.i += 1
                parts[-1] = self.script(parts[-1], ch, self.group())
            elif ch in "-−" and (not parts or parts[-1] in _OPERATOR_WORDS):
                self.i += 1
                parts.append("负")
            else:
                atom = self.atom()
                if atom:
                    parts.append(atom)
        self.i += 1 if stop and self.peek() == stop else 0
        return _join(parts)

    def script(self, base: str, kind: str, exponent: str) -> str:
        if kind == "_":  # x_i "x i", x_1 "x一"
            return base + (" " if exponent[:1].isascii() else "") + exponent
        if exponent in ("度", "撇"):  # 90^\circ, f^\prime
            return base + exponent
        named = {"2": "的平方", "二": "的平方", "3": "的立方", "三": "的立方"}.get(exponent)
        return base + (named or f"的{exponent}次方")

    def group(self) -> str:
        if self.peek() == "{":
            self.i += 1
            return self.parse("}")
        if self.peek() == "\\":
            return self.atom()
        match = re.compile(r"[0-9]+(?:\.[0-9]+)?|\S").match(self.s, self.i)
        if match is None:
            return ""
        self.i = match.end()
        return _said(match.group())

    def atom(self) -> str:
        ch = self.peek()
        if ch == "\\":
            return self.command()
        if ch == "{":
            self.i += 1
            return self.parse("}")
        match = re.compile(r"[0-9]+(?:\.[0-9]+)?|[A-Za-z]|\s+|.").match(self.s, self.i)
        assert match is not None
        self.i = match.end()
        return _said(match.group())

    def command(self) -> str:
        match = re.compile(r"\\([A-Za-z]+|.)").match(self.s, self.i)
        if match is None:
            self.i += 1
            return ""
        self.i = match.end()
        name = match[1]
        if name in _FRACTIONS:
            numerator = self.group()
            return self.group() + "分之" + numerator
        if name == "sqrt":
            degree = ""
            if self.peek() == "[":
                self.i += 1
                degree = self.parse("]") + "次"
            return degree + "根号" + self.group()
        if name in _CONTENT_COMMANDS:
            return self.group()
        if name in LATEX_DROPPED:
            return ""
        return LATEX_COMMANDS.get(name, name if len(name) > 1 else "")


_OPERATOR_WORDS = frozenset(LATEX_OPERATORS.values()) | frozenset(LATEX_COMMANDS.values())


def _said(token: str) -> str:
    if "0" <= token[0] <= "9":
        return read_number(token)
    if token.isspace():
        return ""
    if token.isascii() and token.isalpha():
        return token
    return LATEX_OPERATORS.get(token, SYMBOL_READINGS.get(token, ""))


def _join(parts: list[str]) -> str:
    """Parts joined; a blank only between two Latin letters (variables are spelled)."""
    out = ""
    for part in parts:
        if not part:
            continue
        if out and out[-1].isascii() and out[-1].isalpha() and part[0].isascii():
            out += " "
        out += part
    return out


def read_latex(formula: str) -> str:
    """A LaTeX formula said in Chinese: "E=mc^2" -> "E等于m c的平方" (superscripts as
    powers: "b²" is "b^{2}")."""
    formula = _SUPERSCRIPT_RUN.sub(
        lambda m: "^{" + m.group().translate(_SUPERSCRIPTS) + "}", formula
    )
    return re.sub(r" {2,}", " ", _Latex(formula).parse()).strip()


_DISPLAY = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL)
_INLINE = re.compile(r"(?<![\\$A-Za-z0-9])\$(?=[^\s$])([^$\n]{1,200}?)(?<=[^\s\\])\$(?![0-9$])")
_MATH_CONTENT = re.compile(r"[A-Za-z\\^_=]")
_NOT_MATH_END = re.compile(r"[-–~,，、到至+]$")
_BARE_COMMAND = re.compile(
    r"\\(?:d?frac|tfrac)\{[^{}]*\}\{[^{}]*\}|\\sqrt(?:\[[^\]]*\])?\{[^{}]*\}"
)


def latex_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _DISPLAY.finditer(text):
        formula = match[1] or match[2] or match[3]
        yield word(match.start(), match.end(), read_latex(formula), RULE_LATEX)
    for match in _INLINE.finditer(text):
        formula = match[1]
        if _MATH_CONTENT.search(formula) and not _NOT_MATH_END.search(formula):
            yield word(match.start(), match.end(), read_latex(formula), RULE_LATEX)
    for match in _BARE_COMMAND.finditer(text):
        yield word(match.start(), match.end(), read_latex(match.group()), RULE_LATEX)


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻ⁿ", "0123456789-n")
_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻ⁿ]+")
# A base (a number, a variable, a bracket) and its power; variables written together
# before it ("ax²", "mc^2") are spelled, unless they are a unit after a number (100cm²).
_POWER = re.compile(
    r"(?<![A-Za-z0-9_.])([A-Za-z]{0,3}?)([0-9]+(?:\.[0-9]+)?|[A-Za-z]|\([^()\n]{1,40}\))"
    r"(?:\^(\{[^{}\n]{1,40}\}|-?[0-9]+(?:\.[0-9]+)?|[A-Za-z])|([⁰¹²³⁴⁵⁶⁷⁸⁹⁻ⁿ]+))"
)
_ROOT = re.compile(r"([√∛∜])([0-9]+(?:\.[0-9]+)?|[A-Za-z]|\([^()\n]{1,40}\)|\{[^{}\n]{1,40}\})")
_FACTOR = r"[0-9]+(?:\.[0-9]+)?"
# Blanks on both sides of the sign or on neither: "4.0 x4" is a version and a lane width.
_TIMES = r"(?:[ \t][xX*×][ \t]|[xX*×])"
_PRODUCT = re.compile(
    rf"(?<![A-Za-z0-9_.])({_FACTOR}(?:{_TIMES}{_FACTOR}){{1,3}})(?![0-9_.]|{_TIMES}[0-9])"
)
_FACTORS = re.compile(_FACTOR)
# Lengths after two factors make a size (800×800mm 八百乘八百毫米), not a resolution.
_LENGTH_AFTER = re.compile(
    r"[ \t]?(?:mm|cm|m|km|in|inch|ft|毫米|厘米|公分|分米|米|英寸|寸|尺)(?![A-Za-z])"
)
_COMPARISON = re.compile(r"(?<=[0-9A-Za-z\u4e00-\u9fff])[ \t]?(<=|>=|<|>)[ \t]?(?=-?[0-9])")


# Scientific notation as engineers say it: 1e-4 一e负四, 3.2E8 三点二E八.
_SCIENTIFIC = re.compile(
    r"(?<![A-Za-z0-9_.])([0-9]+(?:\.[0-9]+)?)([eE])([-+−]?)([0-9]{1,3})(?![A-Za-z0-9_])"
)


def product_rule(spans: Spans) -> Iterator[Token]:
    """1e-4 (scientific notation); 1920x1080 (a resolution: digit by digit), 3x3: 乘."""
    for match in _SCIENTIFIC.finditer(spans.text):
        sign = {"-": "负", "−": "负", "+": "正"}.get(match[3], "")
        said = read_number(match[1]) + match[2] + sign + read_number(match[4])
        yield word(match.start(), match.end(), said, RULE_MATH)
    text = spans.text
    for match in _PRODUCT.finditer(text):
        factors = _FACTORS.findall(match[1])
        end = match.end()
        unit = unit_after(text, end)
        if unit is None and text[end : end + 1].isascii() and text[end : end + 1].isalpha():
            continue  # 1920x1080p, 3x3x: another token's
        if unit is not None:
            end = text.index(unit, end) + len(unit)
        resolution = (
            len(factors) == 2
            and all(len(f) >= 3 and f.isdigit() for f in factors)
            and unit is None
            and not _LENGTH_AFTER.match(text, match.end())
        )  # 2560×1440; a size otherwise: 595×565×850mm, 800×800mm, 7×24
        reading = read_digits if resolution else read_number
        said = "乘".join(reading(f) for f in factors)
        if unit is not None and end > match.end():
            after, before = UNITS[unit]
            said = before + said + after
        yield word(match.start(), end, said, RULE_MATH)


# Operators read by this table, not the library's ("÷" is 除以, not 除).
_OPERATOR = re.compile(r"[÷×±≈≠≤≥＝=→∞]")
# A minus after a power or a bracket, before a term: 减 (b²-4ac), not a dash's pause.
_MINUS = re.compile(r"(?<=[²³)）])[-−](?=[0-9A-Za-z(（])")


def operator_rule(spans: Spans) -> Iterator[Token]:
    for match in _OPERATOR.finditer(spans.text):
        yield word(match.start(), match.end(), SYMBOL_READINGS[match.group()], RULE_MATH)
    for match in _MINUS.finditer(spans.text):
        yield word(match.start(), match.end(), "减", RULE_MATH)


def _after_number(text: str, start: int) -> bool:
    k = start - 1 if text[start - 1 : start] in (" ", "\t") else start
    return k > 0 and "0" <= text[k - 1] <= "9"


def math_rule(spans: Spans) -> Iterator[Token]:
    text = spans.text
    for match in _ROOT.finditer(text):  # before powers: √(b²-4ac) is one root
        degree = {"√": "", "∛": "三次", "∜": "四次"}[match[1]]
        yield word(match.start(), match.end(), degree + "根号" + read_latex(match[2]), RULE_MATH)
    for match in _POWER.finditer(text):
        behind = text[max(0, match.start() - 2) : match.start()]
        if (match.group() in UNITS and _after_number(text, match.start())) or (
            behind[-1:] == "/" and behind[:1].isalpha()
        ):
            continue  # 45 m³, μg/m³, m/s²: a unit, the unit rule's
        exponent = match[3] or "{" + match[4].translate(_SUPERSCRIPTS) + "}"
        said = read_latex(" ".join(match[1]) + " " + match[2].strip("()") + "^" + exponent)
        yield word(match.start(), match.end(), said, RULE_MATH)
    for match in _COMPARISON.finditer(text):
        said = LATEX_OPERATORS[match[1]]
        yield word(match.start(), match.end(), said, RULE_MATH)
