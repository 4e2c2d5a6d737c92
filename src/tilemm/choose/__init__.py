"""Choosing a kernel when the call names none: the default (default), its fitted tables by shape class
(by_shape, tables/*.json) and kernel="auto" (auto)."""
