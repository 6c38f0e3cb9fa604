"""little's services: thin processes over the library (projector, resume coordinator)."""

__all__ = []
