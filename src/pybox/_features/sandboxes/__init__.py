"""Sandboxes that persist between runs (issue 14); `install` is their install box."""
