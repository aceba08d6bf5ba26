"""Real device dumps: read ACL/GE, msaccucmp/msprobe npy and msprobe dump.json folders by content, convert the
kernels' layouts, map device ops to ONNX, and write the emulator's tensors in the same formats
(docs/DEVICE_DUMPS.md). Nothing is imported here: a plain check never loads this package's modules."""
