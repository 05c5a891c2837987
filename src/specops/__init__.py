"""specops: speculative decoding for llama.cpp as a production service."""

__version__ = "0.1.0"
