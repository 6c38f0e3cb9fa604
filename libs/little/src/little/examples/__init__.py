"""Example workflows shipped with little: the demo's and the crash tests' reference run."""

__all__ = []
