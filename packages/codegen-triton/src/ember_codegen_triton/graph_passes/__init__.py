"""Graph passes of the CUDA backend, one per file; each class's `id` matches its file name (pad_gemms.py →
pad-gemms). They run on CUDA graphs only and leave every other graph as it is. (`channels-last`, which CPU graphs
take too, is ember-lowering's.)"""

from .pad_gemms import PadGemms

__all__ = ["PadGemms"]
