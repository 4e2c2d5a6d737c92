"""NumPy's and torch's contracts at tilemm's boundary: result dtypes, out=, casting, axes, order,
subok, torch's one-dtype rule and errors."""
