"""The model check: runners over everything that executes an ONNX model, the check of a run against goldens, its
reports, and a peer as referee."""
