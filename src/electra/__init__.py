"""electra: compute-efficient pre-training of text encoders (ELECTRA family)."""

__version__ = "0.1.0"
