"""Number edits (actors/edits.py): the editable integers of an environment, the designer's new values, the variant."""

from actors.edits import MAX_VALUE, numbers, parse_numbers, with_numbers

CODE = '''import random


class GuessEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.reset()

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(1, 20)  # ünïcode before: 20
        self.tries, self.flag = 3, 0
        return "guess", {}
'''


def test_the_editable_numbers_skip_defaults_zero_and_one():
    assert [value for *_, value in numbers(CODE)] == [20, 3]  # not max_turns=12, not 1 and 0
    assert numbers("def broken(:") == []


def test_a_variant_puts_the_new_values_in_and_keeps_the_missing_ones():
    found = numbers(CODE)
    variant = with_numbers(CODE, found, [50, None])
    assert "randint(1, 50)" in variant and "self.tries, self.flag = 3, 0" in variant and "max_turns=12" in variant
    assert with_numbers(CODE, found, [None, None]) == CODE


def test_the_designers_numbers_are_read_from_its_first_boxed_list():
    assert parse_numbers("\\boxed{7, 9} and \\boxed{1, 2}", 2) == [7, 9]
    assert parse_numbers("\\boxed{7", 3) == [7, None, None]  # cut off: the rest keep their values
    assert parse_numbers("no box: 4 then 5 then 6", 2) == [4, 5]
    assert parse_numbers(f"\\boxed{{-3, {MAX_VALUE + 1}, 8}}", 3) == [None, None, 8]  # refused values keep the old
