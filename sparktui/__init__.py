"""sparktui: serve LLMs with vLLM on an NVIDIA DGX Spark, safely."""

__version__ = "0.1.0"
