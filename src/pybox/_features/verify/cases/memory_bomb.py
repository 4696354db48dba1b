"""Hostile: take all the memory there is, touching every page."""

import sys

held = []
while True:
    held.append(b"x" * (8 * 1024 * 1024))
    print(f"holding {8 * len(held)} MiB", flush=True)
    if len(held) > 4096:  # 32 GiB: far past any cap pybox verify asks for
        sys.exit("the memory cap never stopped the program")
