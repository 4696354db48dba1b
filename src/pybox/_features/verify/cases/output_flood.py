"""Hostile: flood stdout with 256 MiB and stderr with 128 MiB, as fast as possible."""

import sys

block = b"y" * (1 << 20)
for _ in range(256):
    sys.stdout.buffer.write(block)
    sys.stderr.buffer.write(block[: 1 << 19])
