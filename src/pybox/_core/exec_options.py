"""`pybox exec`'s options, for the pool client. Generated: do not edit.

`python -m pybox._frontends.cli._execoptions` writes this file from exec's
parser; tests/unit/test_pool_wire.py fails when it is stale.
"""

# Options that take no value.
VALUELESS = frozenset(
    {
        "--help",
        "--json",
        "--quiet",
        "-h",
        "-q",
    }
)
# Options that take one value: the next word, or after "=".
ONE_VALUE = frozenset(
    {
        "--config",
        "--cpus",
        "--egress",
        "--engine",
        "--env",
        "--image",
        "--input",
        "--memory",
        "--open-files",
        "--output",
        "--output-limit",
        "--pids",
        "--runtime",
        "--stdin",
        "--timeout",
        "--writable",
    }
)
