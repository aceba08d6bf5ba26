"""Float64 reference implementations: the ground truth. One module per op family, written for clarity."""
