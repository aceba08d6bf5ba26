"""Registry entries of the built-in kernels, one module per family (imported by registry._load_builtin)."""
