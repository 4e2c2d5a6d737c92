"""Numbers and the arrays that hold them: dtypes and their promotion, which kind of array came in
(arrays), accuracy bounds and checks, digit splits, epilogue math. Imports only tilemm.system."""
