"""Money arithmetic for a small shop's till: amounts are dollars, as floats."""

from __future__ import annotations


def line_total(price: float, quantity: int) -> float:
    """What `quantity` items at `price` each cost."""
    return price * quantity


def subtotal(items: list[tuple[float, int]]) -> float:
    """The sum of the line totals of (price, quantity) pairs."""
    total = 0.0
    for price, quantity in items:
        total += line_total(price, quantity)
    return total


def apply_discount(amount: float, percent: float) -> float:
    """`amount` less `percent` per cent of it."""
    return amount - amount * percent / 100


def add_tax(amount: float, rate_percent: float) -> float:
    """`amount` plus `rate_percent` per cent of it."""
    return amount + amount * rate_percent / 100


def split(amount: float, ways: int) -> list[float]:
    """`amount` shared between `ways` people; the shares add up to `amount`."""
    if ways < 1:
        raise ValueError(f"cannot split between {ways} people; give at least 1")
    share = amount / ways
    return [share] * ways


def format_amount(amount: float) -> str:
    """`amount` as the till prints it: -$1,234.50."""
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"
