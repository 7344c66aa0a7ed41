"""tutorial_lib: the tested, GPU-capable library behind the self-attentive sequential recommendation course."""
__version__ = "0.1.0"
