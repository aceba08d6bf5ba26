"""Hypothesis profiles come from mschecker.profiles: `ci` (derandomized, default here) and `thorough`.

Choose with MSCHECKER_HYPOTHESIS_PROFILE=thorough or `pytest --mschecker-hypothesis-profile=thorough`.
"""
from mschecker.profiles import load_profile

load_profile(default="ci")
