"""Weight quantization schemes: their names here (torch-free, so the command line can list them
without importing torch), one module per scheme (int8.py: int8 and w8a8; int4.py) over one
quantized-linear base (linear.py), and apply.py, which swaps a model's linears for a scheme's."""

SCHEMES = ("int8", "w8a8", "int4")
QUANTIZATIONS = ("none", *SCHEMES)  # what --quantize and EngineConfig.quantize take
