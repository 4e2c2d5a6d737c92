"""The part of a cache key that the caller's parameters make."""
from __future__ import annotations


def typed_items(params: dict) -> tuple:
    """params' (name, value, type of the value), in name order: the type is in the key because True
    and 1, 16 and 16.0 hash alike, and one of each pair is refused where the other is taken."""
    return tuple(sorted((name, value, type(value)) for name, value in params.items()))
