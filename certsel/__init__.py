"""certsel: certified selection of models, quantization configs and prompt templates."""

__version__ = "0.1.0"
