"""Exports that serve elsewhere: ONNX graphs checked against PyTorch with ONNX Runtime
(`electra.exporting.onnx`), and one task of a multi-task model as its own `transformers`
directory (`electra.exporting.serving`). The command as a function is `electra.export`
(`electra.api`)."""
