"""Stored outputs hold on any CPU: no master prints a number at float-noise level.

Strict nbval compares every output with the one stored in the master. Float rounding differs between
CPUs (vector units, oneDNN's kernels, thread counts), so a difference of 3e-7 on the machine that
recorded a master reads 1e-7 on the next one. A check's pass line or a lesson's comparison states
such a difference as a bound ("below 1e-4", "under 1%"), never as the number itself. CI also runs
strict nbval with the floats shaken (`SHAKEN` in the Makefile), which moves the noise's digits.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course_utils import compare

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "solutions").glob("*.ipynb"))

#: Words that make a number a bound ("below 1e-4", "to 1e-6", "at least 1e-06"), not a measurement.
BOUND = r"(?:below|under|within|to|at least|at most|<|<=)\s+"
#: A number a bound may name: a round tolerance (1e-6, 5e-5, 1%, 0.1%), never measured digits.
ROUND = r"(?:[125](?:e-?\d+)?|0\.0*[125])\s?%?"
#: A number under 1e-2 in scientific notation (float noise lives there): 3e-07, 9.2E-8, 1.2e-03.
TINY = r"\d(?:\.\d+)?[eE]-0*(?:[3-9]|[1-9]\d)\b"
#: The same in fixed decimals: 0.0000031, 0.0012.
TINY_DECIMAL = r"\b0\.00\d*[1-9]\d*\b(?!\s?%)"
#: A percentage under 1% with a nonzero digit (0.1%, 0.25 %): float noise and 16-bit rounding.
SMALL_PERCENT = r"\b0\.\d*[1-9]\d*\s?%"
#: A word that says the number is a difference between two runs.
DIFFERENCE = (
    r"\b(?:mismatch|error|errors|difference|differs?|off|noise|deviation|gap|agree)\b|\|[^|]*-[^|]*\|"
)


def noise_numbers(text: str) -> list[str]:
    """The lines of ``text`` that print a difference at float-noise level as a measured number: a
    check's pass line with a tiny number, or a difference stated with one; a round number after a
    bound word ("below 1e-4") is a bound, and passes."""
    found = []
    for line in text.splitlines():
        measured = re.sub(BOUND + ROUND + r"(?![\d.])", "", line)
        tiny = any(re.search(p, measured) for p in (TINY, TINY_DECIMAL, SMALL_PERCENT))
        if tiny and (line.lstrip().startswith("[pass]") or re.search(DIFFERENCE, line, re.IGNORECASE)):
            found.append(line.strip())
    return found


def _stored_text(cell: nbformat.NotebookNode) -> str:
    """Every output nbval compares as text: streams, plain text, and HTML, Markdown or LaTeX with
    their markup stripped (an HTML table of numbers is compared strictly too)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") == "error":
            parts.append(output.get("evalue", ""))
        for kind in ("text/plain", "text/html", "text/markdown", "text/latex"):
            text = output.get("data", {}).get(kind, "")
            parts.append(re.sub(r"<[^>]+>", " ", text) if kind == "text/html" else text)
    return "\n".join(parts)


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.name[:2])
def test_no_stored_output_prints_float_noise(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    noisy = [
        f"cell {i}: {line}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for line in noise_numbers(_stored_text(cell))
    ]
    assert noisy == [], "print these as a bound (course_utils.compare.below / percent):\n" + "\n".join(noisy)


@pytest.mark.parametrize(
    "line",
    [
        # the three cells that failed on another CPU, as they were stored here
        "[pass] even_batches: 7 examples asked in 4s: 1 step of 4; 3 asked in 3s: 1 step of 2; 2 replicas "
        "give one device's update (largest update error 3e-07).",
        "[pass] fit_on_replicas: 2 replicas x 16, the weights of one device trained on batches of 32 "
        "(mismatch 1e-08).",
        "bfloat16, no loss scaling    update on 2 replicas = 1.00x the single-device update, and differs "
        "in direction too (0.1% mismatch); reported loss 1.00x the single-device loss",
        # and as the other CPU printed them, or as they might be printed
        "[pass] fit_on_replicas: ... (mismatch 9e-09).",
        "largest update error 4E-07",
        "mismatch 1.2e-03",
        "largest difference 0.0000031",
        "(0.2 % mismatch)",
        "the two runs differ by at most 3.1e-06",
        "weights agree to 3.2e-07",
        "max abs deviation 2.3e-07",
        "max |w2 - w1| = 3e-07",
        "<td>mismatch</td><td>0.0012</td>",
    ],
)
def test_the_rule_catches_noise_printed_as_a_number(line: str) -> None:
    assert noise_numbers(re.sub(r"<[^>]+>", " ", line)) != []


@pytest.mark.parametrize(
    "line",
    [
        "[pass] fit_on_replicas: 2 replicas x 16, the weights of one device (mismatch below 1e-4).",
        "all-reduced gradient equals the single-device gradient (to 1e-6): True",
        "bfloat16, no loss scaling    update = 1.00x, and differs in direction too (under 1% mismatch)",
        "clipnorm=0.01  update on 2 replicas = 1.34x, and differs in direction too (31.2% mismatch)",
        "Model.fit with the add_loss penalty: 1.00x the single-device update, 0.0% mismatch",
        "3 epochs, learning rate per epoch: 0.001, 0.0001, 1e-05",
        "float16   smallest normal 6.1e-05, smallest subnormal 5.96e-08, largest 6.55e+04",
        "compared with your step (the same: within 16 x the step's own float noise, at least 1e-06):",
        "learning rate 1e-05 for epoch 3, loaded from COURSE_OFFLINE's cache",
        "Model.fit with the add_loss penalty: 1.00x the single-device update, under 0.1% mismatch",
    ],
)
def test_bounds_lessons_and_constants_pass(line: str) -> None:
    assert noise_numbers(line) == []


def test_the_formatters_print_bounds() -> None:
    assert compare.below(1e-4) == "below 1e-4"
    assert compare.below(5e-6) == "below 5e-6"
    assert compare.below(1.4e-3) == "below 2e-3"  # rounded up, so still a bound
    assert compare.percent(0.0012) == "under 1%"
    assert compare.percent(0.361) == "36.1%"
    assert compare.percent(0.004, floor=0.001) == "0.4%"
    for line in (f"(mismatch {compare.below(1e-4)})", f"({compare.percent(0.002)} mismatch)"):
        assert noise_numbers(line) == []


@pytest.mark.parametrize("name", ["nbval_sanitize.cfg", "nbval_sanitize_colab.cfg"])
def test_nbval_reads_every_sanitizer_rule(name: str) -> None:
    """nbval takes a rule only as a `regex: ` line followed by a `replace: ` line with text after the
    space; a rule it does not read is a silent no-op (two were, until a GPU run showed it)."""
    from nbval.plugin import get_sanitize_patterns

    text = (ROOT / "tests" / name).read_text()
    rules = re.findall(r"^regex: .*$", text, flags=re.MULTILINE)
    read = get_sanitize_patterns(text)
    assert len(read) == len(rules), f"{name}: nbval reads {len(read)} of its {len(rules)} rules"
    for regex, _ in read:
        re.compile(regex)
