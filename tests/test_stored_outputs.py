"""Stored outputs hold on any CPU: no master prints a number at float-noise level.

Strict nbval compares every output with the one stored in the master. Float rounding differs between
CPUs (vector units, oneDNN's kernels, thread counts), so a difference of 3e-7 on the machine that
recorded a master reads 1e-7 on the next one. A check's pass line or a lesson's comparison states
such a difference as a bound ("below 1e-4", "under 1%"), never as the number itself. CI also runs
strict nbval a second time with the floats shaken (`SHAKEN` in the Makefile), which moves the noise.
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
#: A number in scientific notation under 1e-3 (float noise lives there): 3e-07, 9.2e-8, 1e-08.
TINY = r"\d(?:\.\d+)?e-(?:0*[4-9]|[1-9]\d)\b"
#: A percentage under 1% with a nonzero digit (0.1%, 0.25%): float noise and 16-bit rounding.
SMALL_PERCENT = r"\b0\.\d*[1-9]\d*%"
#: A word that says the number is a difference between two runs.
DIFFERENCE = r"(?:mismatch|error|difference|differs?|off|noise)"


def noise_numbers(text: str) -> list[str]:
    """The lines of ``text`` that print a difference at float-noise level as a measured number: a
    check's pass line with a tiny number, or a difference stated with one, not bounded."""
    found = []
    for line in text.splitlines():
        bounded = re.sub(BOUND + rf"(?:{TINY}|{SMALL_PERCENT}|\d[\d.]*%?)", "", line)
        tiny = re.search(TINY, bounded) or re.search(SMALL_PERCENT, bounded)
        if tiny and (line.lstrip().startswith("[pass]") or re.search(DIFFERENCE, line, re.IGNORECASE)):
            found.append(line.strip())
    return found


def _stored_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append(output.get("evalue", ""))
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
        # the three cells that failed on another CPU, as they were stored
        "[pass] even_batches: 7 examples asked in 4s: 1 step of 4; 2 replicas give one device's update "
        "(largest update error 4e-07).",
        "[pass] fit_on_replicas: 2 replicas x 16, the weights of one device trained on batches of 32 "
        "(mismatch 9e-09).",
        "bfloat16, no loss scaling    update on 2 replicas = 1.00x the single-device update, and differs "
        "in direction too (0.2% mismatch); reported loss 1.00x the single-device loss",
        "[pass] fit_resumable: resumed at epoch 2 (mismatch 1.2e-07).",
        "the two runs differ by 3.1e-06 at most",
    ],
)
def test_the_rule_catches_noise_printed_as_a_number(line: str) -> None:
    assert noise_numbers(line) == [line]


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
    ],
)
def test_bounds_lessons_and_constants_pass(line: str) -> None:
    assert noise_numbers(line) == []


def test_the_formatters_print_bounds() -> None:
    assert compare.below(1e-4) == "below 1e-4"
    assert compare.below(5e-6) == "below 5e-6"
    assert compare.percent(0.0012) == "under 1%"
    assert compare.percent(0.361) == "36.1%"
    assert compare.percent(0.004, floor=0.001) == "0.4%"
    for line in (f"(mismatch {compare.below(1e-4)})", f"({compare.percent(0.002)} mismatch)"):
        assert noise_numbers(line) == []
