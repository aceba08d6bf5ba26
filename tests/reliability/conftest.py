"""Fixtures shared by the reliability tests: a tiny valid model and an input for it."""
import pytest

from .support import save_x, tiny_model


@pytest.fixture
def model(tmp_path):
    return tiny_model(tmp_path / "m.onnx")


@pytest.fixture
def x(tmp_path):
    return save_x(tmp_path / "x.npy")
