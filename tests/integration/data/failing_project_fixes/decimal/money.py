"""Money arithmetic for a small shop's till: amounts are dollars.

Fix: exact decimal arithmetic (decimal.Decimal), rounded to the cent half up.
Amounts may be given as floats or strings; a float is read by its shortest
repr, so 0.1 means 0.10, not 0.1000000000000000055511151231257827."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
Amount = Decimal | float | int | str


def _money(value: Amount) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def line_total(price: Amount, quantity: int) -> Decimal:
    """What `quantity` items at `price` each cost."""
    return _cents(_money(price) * quantity)


def subtotal(items: list[tuple[Amount, int]]) -> Decimal:
    """The sum of the line totals of (price, quantity) pairs."""
    return _cents(sum((line_total(price, quantity) for price, quantity in items), Decimal(0)))


def apply_discount(amount: Amount, percent: Amount) -> Decimal:
    """`amount` less `percent` per cent of it."""
    value = _money(amount)
    return _cents(value - value * _money(percent) / 100)


def add_tax(amount: Amount, rate_percent: Amount) -> Decimal:
    """`amount` plus `rate_percent` per cent of it."""
    value = _money(amount)
    return _cents(value + value * _money(rate_percent) / 100)


def split(amount: Amount, ways: int) -> list[Decimal]:
    """`amount` shared between `ways` people; the shares add up to `amount`
    and the first shares take the odd cents."""
    if ways < 1:
        raise ValueError(f"cannot split between {ways} people; give at least 1")
    cents = int(_cents(_money(amount)) / CENT)
    share, odd = divmod(cents, ways)
    return [(share + (1 if i < odd else 0)) * CENT for i in range(ways)]


def format_amount(amount: Amount) -> str:
    """`amount` as the till prints it: -$1,234.50."""
    value = _cents(_money(amount))
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.2f}"
