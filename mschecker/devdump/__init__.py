"""Real device dumps: read ACL/GE, msaccucmp/msprobe npy and msprobe dump.json folders by content, convert the
kernels' layouts, map device ops to ONNX, and write the emulator's tensors in the same formats
(docs/DEVICE_DUMPS.md). Submodules import lazily: a plain check never loads this package."""


def load_graph_outputs(folder, model, names) -> dict:
    """The graph outputs `names` a dump folder holds (evidence.graph_outputs): another device's run as a referee."""
    from .evidence import graph_outputs

    return graph_outputs(folder, model, names)
