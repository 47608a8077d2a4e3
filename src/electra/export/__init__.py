"""Exports that serve elsewhere: ONNX graphs checked against PyTorch with ONNX Runtime
(`electra.export.onnx`), and one task of a multi-task model as its own `transformers`
directory (`electra.export.serving`).

Called, the package is the command: `from electra import export; export(...)` runs `electra
export` (`electra.api`, `help(electra.api.export)`)."""

from electra.command_package import make_callable

make_callable(__name__)
