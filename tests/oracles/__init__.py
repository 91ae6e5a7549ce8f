"""Exact oracles the package's fast paths are proved equal to (they are not shipped)."""
