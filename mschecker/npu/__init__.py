"""Emulated NPU numerics: profiles (presets are TOML files in presets/), ATC config parsers (atc), the NPU policy
(policy), device plans and fusions. Import the module you need: this face imports nothing, so that parsing NPU
flags (knobs) does not load the executor."""
