"""Exports that serve elsewhere: ONNX graphs checked against PyTorch with ONNX Runtime
(`electra.export.onnx`), and one task of a multi-task model as its own `transformers`
directory (`electra.export.serving`)."""
