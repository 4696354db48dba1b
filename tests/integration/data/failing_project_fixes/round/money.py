"""Money arithmetic for a small shop's till: amounts are dollars, as floats.

Fix attempt: round every result to the cent with round()."""

from __future__ import annotations


def _cents(amount: float) -> float:
    return round(amount, 2)


def line_total(price: float, quantity: int) -> float:
    """What `quantity` items at `price` each cost."""
    return _cents(price * quantity)


def subtotal(items: list[tuple[float, int]]) -> float:
    """The sum of the line totals of (price, quantity) pairs."""
    total = 0.0
    for price, quantity in items:
        total += line_total(price, quantity)
    return _cents(total)


def apply_discount(amount: float, percent: float) -> float:
    """`amount` less `percent` per cent of it."""
    return _cents(amount - amount * percent / 100)


def add_tax(amount: float, rate_percent: float) -> float:
    """`amount` plus `rate_percent` per cent of it."""
    return _cents(amount + amount * rate_percent / 100)


def split(amount: float, ways: int) -> list[float]:
    """`amount` shared between `ways` people; the shares add up to `amount`."""
    if ways < 1:
        raise ValueError(f"cannot split between {ways} people; give at least 1")
    share = _cents(amount / ways)
    shares = [share] * ways
    shares[0] = _cents(amount - share * (ways - 1))
    return shares


def format_amount(amount: float) -> str:
    """`amount` as the till prints it: -$1,234.50."""
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"
