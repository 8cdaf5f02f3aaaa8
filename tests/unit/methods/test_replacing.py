"""Module replacing (Theseus and its kin): how the teacher's layers split into predecessor modules,
and which teacher layer each successor starts as."""

from __future__ import annotations

import pytest

from methods._replacing import module_groups, successor_init_layers


def test_modules_are_as_equal_as_possible_with_the_larger_ones_at_the_bottom():
    assert module_groups(12, 6) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert module_groups(6, 4) == [[0, 1], [2, 3], [4], [5]]
    assert module_groups(6, 3, split=[1, 2, 3]) == [[0], [1, 2], [3, 4, 5]]


def test_a_split_must_cover_every_teacher_layer_once():
    with pytest.raises(ValueError, match="cannot split a 4-layer teacher into 5 modules"):
        module_groups(4, 5)
    with pytest.raises(ValueError, match="these sum to 5"):
        module_groups(6, 2, split=[2, 3])
    with pytest.raises(ValueError, match="has 3 modules but the student has 2"):
        module_groups(6, 2, split=[2, 2, 2])


def test_successors_start_at_the_bottom_the_top_or_each_modules_top_layer():
    groups = module_groups(6, 3)
    assert successor_init_layers(groups, "bottom") == [0, 1, 2]
    assert successor_init_layers(groups, "top") == [3, 4, 5]
    assert successor_init_layers(groups, "every_kth") == [1, 3, 5]
