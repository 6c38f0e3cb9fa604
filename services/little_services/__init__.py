"""little's services: thin processes over the library (projector, resume coordinator).

Their errors are under little's root (``little.errors`` draws the library's; a test holds
this drawing to the code, the library's classes without a module being anchors):

    LittleError
    ├── LogError
    │   ├── ProjectorFencedError  (little_services.projection)  another instance took the partitions
    │   └── ProjectorStalledError (little_services.projection)  a transaction stuck in librdkafka; retryable
    └── RebuildWorkerError        (little_services.projection)  a rebuild worker process failed
"""

__all__ = []
