"""mschecker: accuracy verification and regression for reduced-precision operators and ONNX models."""

__version__ = "0.1.0"
