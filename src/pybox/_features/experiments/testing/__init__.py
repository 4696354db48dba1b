"""Test runners an experiment can detect, run and read (a small registry: one file a runner)."""
