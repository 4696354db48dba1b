"""The till's rules. Amounts are compared as the till would print them, to the cent:
0.30000000000000004 is not 0.30."""

from __future__ import annotations

import unittest
from decimal import Decimal

from money import add_tax, apply_discount, format_amount, line_total, split, subtotal


class MoneyCase(unittest.TestCase):
    def assert_money(self, actual: object, expected: str) -> None:
        self.assertEqual(Decimal(str(actual)), Decimal(expected), f"{actual!r} is not {expected}")

    def assert_shares(self, actual: list[object], expected: list[str]) -> None:
        self.assertEqual(
            [Decimal(str(share)) for share in actual],
            [Decimal(share) for share in expected],
            f"{actual!r} are not {expected}",
        )


class TestLineItems(MoneyCase):
    def test_line_total(self) -> None:
        self.assert_money(line_total(2.50, 4), "10.00")

    def test_subtotal_of_nothing_is_zero(self) -> None:
        self.assert_money(subtotal([]), "0")

    def test_subtotal_of_whole_amounts(self) -> None:
        self.assert_money(subtotal([(1.25, 2), (0.50, 1)]), "3.00")

    def test_subtotal_of_line_items(self) -> None:
        self.assert_money(subtotal([(0.10, 1), (0.20, 1)]), "0.30")


class TestDiscountAndTax(MoneyCase):
    def test_discount_ten_percent(self) -> None:
        self.assert_money(apply_discount(50.00, 10), "45.00")

    def test_no_discount_changes_nothing(self) -> None:
        self.assert_money(apply_discount(1.15, 0), "1.15")

    def test_tax_on_whole_dollars(self) -> None:
        self.assert_money(add_tax(100.00, 8), "108.00")

    def test_tax_rounds_half_cents_up(self) -> None:
        # 2.625 is exact in binary (round() goes to the even cent);
        # 2.675 is stored as 2.67499999... (round() goes down).
        self.assert_money(add_tax(2.50, 5), "2.63")
        self.assert_money(add_tax(2.50, 7), "2.68")


class TestSplit(MoneyCase):
    def test_split_evenly(self) -> None:
        self.assert_shares(split(9.00, 3), ["3.00", "3.00", "3.00"])

    def test_split_one_way(self) -> None:
        self.assert_shares(split(12.34, 1), ["12.34"])

    def test_split_three_ways(self) -> None:
        # The shares add up to the bill; the first share takes the odd cent.
        self.assert_shares(split(10.00, 3), ["3.34", "3.33", "3.33"])

    def test_split_needs_at_least_one_way(self) -> None:
        with self.assertRaises(ValueError):
            split(10.00, 0)


class TestFormat(MoneyCase):
    def test_format_amount(self) -> None:
        self.assertEqual(format_amount(1234.5), "$1,234.50")

    def test_format_a_refund(self) -> None:
        self.assertEqual(format_amount(-3.5), "-$3.50")


if __name__ == "__main__":
    unittest.main()
