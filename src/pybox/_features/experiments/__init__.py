"""Experiments: a project copied into a sandbox, its changes shown against a baseline."""
