"""The comparison plot (a black-box review): differences below rtol x 1e-3 were all drawn on a
floor of 5e-5 with no word of it, so 0, 1e-7 and 4.4e-7 looked alike and bit for bit could not
be told from drift; runs of 60 and 30 steps were drawn over their 30 common steps (two
identical curves) under the title "differ"; values near 1e300 leaked matplotlib's overflow
warning to stderr."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from autotune.repro import compare
from autotune.repro.compare_plot import NONFINITE_GID, ZERO_GID, draw_comparison, plot_comparison

pytest.importorskip("matplotlib")

BASE = [2 * math.exp(-i / 10) + 0.1 for i in range(30)]


def _lines(fig, gid: str) -> list:  # type: ignore[no-untyped-def]
    return [line for ax in fig.axes for line in ax.get_lines() if line.get_gid() == gid]


def _texts(fig) -> str:  # type: ignore[no-untyped-def]
    return " ".join(
        [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes]
    )


def test_exact_zeros_are_said_bit_for_bit() -> None:
    r = compare.compare_series(range(30), BASE, range(30), BASE)
    fig = draw_comparison(r)
    assert "bit for bit: no difference at any of the 30 common steps" in _texts(fig)
    (zero,) = _lines(fig, ZERO_GID)
    assert list(zero.get_xdata()) == list(range(30))


def test_small_differences_are_drawn_at_their_value() -> None:
    b = list(BASE)
    b[3], b[10] = BASE[3] * (1 + 1e-7), BASE[10] * (1 + 4.4e-7)
    r = compare.compare_series(range(30), BASE, range(30), b)
    fig = draw_comparison(r)
    bottom = fig.axes[1]
    raw = bottom.get_lines()[0].get_ydata()
    assert raw[3] == pytest.approx(1e-7, rel=1e-3) and raw[10] == pytest.approx(4.4e-7, rel=1e-3)
    assert bottom.get_ylim()[0] < 1e-7  # the axis reaches the smallest difference
    (zero,) = _lines(fig, ZERO_GID)
    assert 3 not in zero.get_xdata() and 0 in zero.get_xdata()
    assert "bit for bit" not in _texts(fig)


def test_runs_of_other_lengths_are_drawn_whole() -> None:
    r = compare.compare_series(range(60), BASE * 2, range(30), BASE)
    assert not r["agree"]
    fig = draw_comparison(r)
    (a,) = _lines(fig, "a")
    (b,) = _lines(fig, "b")
    assert len(a.get_xdata()) == 60 and len(b.get_xdata()) == 30
    assert "lengths differ: 60 vs 30 steps" in _texts(fig)


def test_a_non_finite_departure_is_marked() -> None:
    b = list(BASE)
    b[5] = math.inf
    fig = draw_comparison(compare.compare_series(range(30), BASE, range(30), b))
    (mark,) = _lines(fig, NONFINITE_GID)
    assert list(mark.get_xdata()) == [5]


def test_huge_values_plot_without_warnings(tmp_path: Path) -> None:
    big = [1e300 * v for v in BASE]
    r = compare.compare_series(range(30), big, range(30), BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_comparison(r, tmp_path / "x.png")
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
