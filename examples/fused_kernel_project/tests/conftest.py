"""Importing fusedkern.checks registers the kernel with mschecker's registry for check_kernel()."""
import fusedkern.checks  # noqa: F401
