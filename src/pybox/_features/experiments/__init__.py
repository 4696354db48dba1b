"""Experiments: a copy of a project in a sandbox, its commands, tests and changes."""
