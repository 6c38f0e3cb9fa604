"""little's version, in a module of its own: a module of the package that records it (golden
files) takes it from here, never from ``little/__init__``, which imports that module back.
"""

__version__ = "0.1.0"
