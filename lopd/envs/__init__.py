"""Environments."""
