"""Converters, one module per op family; importing them registers them."""
