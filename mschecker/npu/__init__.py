"""Emulated NPU numerics: profiles (presets are TOML files in presets/), ATC config parsers, the NPU policy."""
from .atc import parse_keep_dtype, parse_op_precision_ini
from .policy import NpuPolicy
from .profile import NumericsProfile, load_profile, preset_names

__all__ = ["NpuPolicy", "NumericsProfile", "load_profile", "parse_keep_dtype", "parse_op_precision_ini",
           "preset_names"]
