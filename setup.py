"""Declares only the optional C extension; all other metadata is in pyproject.toml.

mschecker._fastcompare is a one-pass kernel for the streaming comparison (mschecker/compare.py). It is optional:
when no C compiler is available the build of it fails quietly (optional=True) and the numpy path runs.
-ffp-contract=off keeps a*b + c from becoming a fused multiply-add, so the tolerance bound rounds exactly as
numpy computes it; no -march=native (portable builds), no -ffast-math (IEEE semantics are required).
"""
import sys

from setuptools import Extension, setup

_args = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-ffp-contract=off"]

setup(ext_modules=[Extension("mschecker._fastcompare", ["mschecker/_fastcompare.c"], extra_compile_args=_args,
                             optional=True)])
