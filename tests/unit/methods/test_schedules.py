"""Schedules at their boundary steps: the values every replacing method's on_step returns."""

from __future__ import annotations

import pytest

from methods._schedules import (
    AGGR20,
    linear_anneal_points,
    piecewise_linear,
    replacement_rate,
    replacing_phase_steps,
    steps_until_full_rate,
    validate_points,
)


def test_full_rate_step_from_slope_steps_or_fraction():
    assert steps_until_full_rate(0.3, 1000, slope=0.07) == pytest.approx(10.0)
    assert steps_until_full_rate(0.3, 1000, replacing_steps=40) == 40.0
    assert steps_until_full_rate(0.3, 1000, replacing_fraction=0.25) == 250.0
    assert steps_until_full_rate(0.3, 10, replacing_fraction=0.26) == 3.0  # rounded to whole steps
    with pytest.raises(ValueError, match="either slope or replacing_steps"):
        steps_until_full_rate(0.3, 1000, slope=0.01, replacing_steps=10)
    with pytest.raises(ValueError, match="positive"):
        steps_until_full_rate(0.3, 1000, slope=0.0)


@pytest.mark.parametrize(
    "kind, expected",
    [
        # b = 0.3, R = 10: steps 0, 5, 9 (last below 1), 10 (reaches 1), 11, 1000
        ("linear", [0.3, 0.65, 0.93, 1.0, 1.0, 1.0]),
        ("constant", [0.3, 0.3, 0.3, 1.0, 1.0, 1.0]),
        ("anti_curriculum", [0.7, 0.35, 0.07, 1.0, 1.0, 1.0]),
    ],
)
def test_replacement_rate_at_boundaries(kind, expected):
    got = [replacement_rate(step, kind, 0.3, 10.0) for step in (0, 5, 9, 10, 11, 1000)]
    assert got == pytest.approx(expected)
    assert replacement_rate(10, kind, 0.3, 10.0) == 1.0  # exactly: predecessors are never run again


def test_curriculum_given_as_slope_matches_given_as_steps():
    from_slope = steps_until_full_rate(0.1, 500, slope=0.009)  # R = 100
    from_steps = steps_until_full_rate(0.1, 500, replacing_steps=100)
    for step in (0, 1, 50, 99, 100, 101):
        assert replacement_rate(step, "linear", 0.1, from_slope) == pytest.approx(replacement_rate(step, "linear", 0.1, from_steps))
        # anti-curriculum is 1 − p(t) for the same b and k while replacing
        if step < 100:
            assert replacement_rate(step, "anti_curriculum", 0.1, from_slope) == pytest.approx(
                1 - replacement_rate(step, "linear", 0.1, from_slope)
            )


def test_full_base_rate_and_zero_length_replacing():
    assert replacement_rate(0, "linear", 1.0, steps_until_full_rate(1.0, 100, slope=0.5)) == 1.0
    assert replacement_rate(0, "constant", 0.5, 0.0) == 1.0
    assert replacement_rate(0, "constant", 0.5, float("inf")) == 0.5


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown replacement schedule"):
        replacement_rate(0, "cosine", 0.3, 10.0)


def test_replacing_phase_steps_rounds_up_and_caps():
    assert replacing_phase_steps(9.5, 100) == 10  # step 9 still has p < 1
    assert replacing_phase_steps(10.0, 100) == 10
    assert replacing_phase_steps(150.0, 100) == 100
    assert replacing_phase_steps(0.0, 100) == 0


def test_aggr20_at_its_boundaries():
    fractions = [0.0, 0.05, 0.1, 0.15, 0.2, 0.2001, 0.5, 1.0]
    expected = [1.0, 0.65, 0.3, 0.15, 0.0, 0.0, 0.0, 0.0]
    assert [piecewise_linear(f, AGGR20) for f in fractions] == pytest.approx(expected)
    # as the loop computes the fraction: step / total
    total = 30
    assert piecewise_linear(3 / total, AGGR20) == pytest.approx(0.3)
    assert piecewise_linear(6 / total, AGGR20) == 0.0  # exactly 0 from 20% on
    assert piecewise_linear(5 / total, AGGR20) == pytest.approx(0.3 * (1 - (5 / 30 - 0.1) / 0.1))


def test_linear_anneal_and_custom_points():
    points = linear_anneal_points(0.5)
    assert [piecewise_linear(f, points) for f in (0.0, 0.25, 0.5, 0.9)] == pytest.approx([1.0, 0.5, 0.0, 0.0])
    held = [(0.2, 0.8), (0.6, 0.0)]  # before the first point its value holds
    assert [piecewise_linear(f, held) for f in (0.0, 0.2, 0.4, 0.6, 1.0)] == pytest.approx([0.8, 0.8, 0.4, 0.0, 0.0])
    assert piecewise_linear(0.7, [(0.0, 0.25)]) == 0.25
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        linear_anneal_points(0.0)


@pytest.mark.parametrize(
    "points, message",
    [
        ([], "at least one"),
        ([(0.0, 1.0), (0.0, 0.5)], "strictly increasing"),
        ([(0.5, 1.0), (0.2, 0.0)], "strictly increasing"),
        ([(0.0, 1.5)], r"in \[0, 1\]"),
        ([(-0.1, 1.0)], r"in \[0, 1\]"),
    ],
)
def test_invalid_points_are_rejected(points, message):
    with pytest.raises(ValueError, match=message):
        validate_points(points)
