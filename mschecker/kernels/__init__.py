"""The kernel registry feature (OpInfo-like): each kernel's float64 reference, its optimized variants with their
error contracts and planted bugs (entries/), the contract check of one case, the suite, goldens and strategies."""
