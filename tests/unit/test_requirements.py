"""Libraries an agent asks for: names and version specifiers only, normalized;
every other form refused before anything exists, naming the item and why."""

from __future__ import annotations

import pytest

from pybox._core.errors import InvalidRequest
from pybox._core.requirements import MAX_LIBRARIES, MAX_LIBRARY_CHARS, parse_libraries


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("requests", "requests"),
        ("Requests", "requests"),
        ("numpy==2.1.0", "numpy==2.1.0"),
        ("attrs>=23,<25", "attrs>=23,<25"),
        ("attrs >= 23 , < 25", "attrs>=23,<25"),
        ("pkg[extra]~=1.2", "pkg[extra]~=1.2"),
        ("PKG[Extra_B, a]~=1.2", "pkg[a,extra-b]~=1.2"),
        ("zope.interface", "zope-interface"),
        ("Foo__Bar", "foo-bar"),
        ("numpy==2.1.*", "numpy==2.1.*"),
        ("six!=1.16.0", "six!=1.16.0"),
        ("pkg===1.0+local", "pkg===1.0+local"),
        ("  idna  ", "idna"),
        ("pkg[]", "pkg"),
    ],
)
def test_names_and_specifiers_are_accepted_and_normalized(given: str, normalized: str) -> None:
    assert parse_libraries([given]) == (normalized,)


def test_order_is_kept_and_an_exact_repeat_dropped() -> None:
    assert parse_libraries(["six", "idna", "Six", "idna>=3"]) == ("six", "idna", "idna>=3")


def test_no_libraries_is_an_empty_tuple() -> None:
    assert parse_libraries([]) == ()


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ("https://example.invalid/six.whl", "is a URL"),
        ("git+https://example.invalid/six", "is a URL"),
        ("file:six", "is a URL"),
        ("./six", "is a path"),
        ("../six", "is a path"),
        ("/tmp/six", "is a path"),
        ("dir/six", "is a path"),
        ("c\\six", "is a path"),
        ("~/six", "is a path"),
        ("six-1.17.0-py3-none-any.whl", "archive file"),
        ("six.tar.gz", "archive file"),
        ("-r requirements.txt", "starts with '-'"),
        ("--index-url=http://example.invalid", "starts with '-'"),
        ("-e .", "starts with '-'"),
        ("six @ https://example.invalid/six.whl", "direct reference"),
        ("six@https://example.invalid/six.whl", "direct reference"),
        ('six; python_version > "3"', "environment marker"),
        ("six==1.17.0;sys_platform=='linux'", "environment marker"),
        ("requests six", "more than one token"),
        ("six==1.17.0 --hash=sha256:00", "more than one token"),
        ("six\n--index-url x", "control characters"),
        ("six\x00", "control characters"),
        ("six\x1b[2J", "control characters"),
        ("six\t", "control characters"),
        ("", "empty"),
        ("   ", "empty"),
        ("é", "ASCII only"),
        ("pkg[extra", "not a package name"),
        ("==1.0", "not a package name"),
        ("six,idna", "not a package name"),
        ("six (>=1.0)", "more than one token"),
        ("six>=", "not a package name"),
        ("a" * (MAX_LIBRARY_CHARS + 1), "characters long"),
    ],
)
def test_every_other_form_is_refused_naming_the_item_and_why(item: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_libraries(["idna", item])
    message = str(refused.value)
    assert message.startswith("Library 2, ")
    assert why in message
    assert "Give names with optional version specifiers only" in message
    # The item is shown escaped, so it cannot start a new line or move the cursor.
    assert "\n" not in message and "\x1b" not in message and "\x00" not in message


def test_a_long_item_is_shown_cut_short() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_libraries(["a" * 500])
    assert "a" * 61 not in str(refused.value)
    assert "500 characters long, more than 200" in str(refused.value)


def test_an_item_of_exactly_the_longest_length_is_accepted() -> None:
    assert parse_libraries(["a" * MAX_LIBRARY_CHARS]) == ("a" * MAX_LIBRARY_CHARS,)


def test_more_than_the_most_items_is_refused_whole() -> None:
    assert len(parse_libraries([f"pkg{i}" for i in range(MAX_LIBRARIES)])) == MAX_LIBRARIES
    with pytest.raises(InvalidRequest, match="33 libraries were asked for; at most 32"):
        parse_libraries([f"pkg{i}" for i in range(MAX_LIBRARIES + 1)])


@pytest.mark.parametrize("given", ["six", b"six", None, 3, {"six": "1"}])
def test_a_string_or_other_non_list_is_refused(given: object) -> None:
    with pytest.raises(InvalidRequest, match="must be a list of requirement strings"):
        parse_libraries(given)  # type: ignore[arg-type]


def test_an_item_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="Library 2 is int 3, not a string"):
        parse_libraries(["six", 3])  # type: ignore[list-item]
