"""Analyses the passes share (they read the IR and change nothing)."""
