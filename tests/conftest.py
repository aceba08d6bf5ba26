"""Hypothesis profiles: `ci` (derandomized, default) and `thorough` (many more examples, on demand).

Choose with MSCHECKER_HYPOTHESIS_PROFILE=thorough (or hypothesis' own --hypothesis-profile option).
"""
import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=25, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", deadline=None, max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("MSCHECKER_HYPOTHESIS_PROFILE", "ci"))
