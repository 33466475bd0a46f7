"""Weight quantization schemes: their names here (torch-free, so the command line can list them
without importing torch), one module per scheme (int8.py: int8 and w8a8; int4.py; and bf12.py, the
lossless 12-bit form of bf16) over one quantized-linear base (linear.py), and apply.py, which swaps
a model's linears for a scheme's."""

SCHEMES = ("int8", "w8a8", "int4")
QUANTIZATIONS = ("none", *SCHEMES)  # what --quantize and EngineConfig.quantize take
# bf16 weights stored losslessly in 12 bits (bf12.py): not a --quantize choice, the numbers do not change
BF12 = "bf12"
WEIGHTS_12BIT = ("auto", "on", "off")  # what --weights-12bit and EngineConfig.weights_12bit take
