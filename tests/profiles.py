"""Test profiles shared by the suite (files under tests/fixtures/profiles/).

GENERIC_FP16: a generic fp16 emulator profile (no `device`; the old ascend910b preset) for tests of the emulator's
MECHANICS -- variant selection by implmode, the bisect engine on planted fp16 hazards, keep_dtype by ONNX op type,
knob merging. The device presets (ascend910b, ascend310p) run the CANN kernels of the device kernel table, which do
not have those hazards (no device does), and speak Ascend IR op types; see the file's own comment.
"""
from pathlib import Path

GENERIC_FP16 = Path(__file__).resolve().parent / "fixtures" / "profiles" / "generic_fp16.toml"
