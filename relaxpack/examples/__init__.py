"""Bundled example programs, built in code so nothing is downloaded."""

from .transformer import transformer_block

__all__ = ["transformer_block"]
