"""tilemm in PyTorch: torch.library operators (autograd, torch.func, torch.compile), the fused and grouped
products' autograd, and what tilemm.nn's Linear runs."""
