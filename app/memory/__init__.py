"""The memory domain: remember, recall, update and forget shared memories.

Rooms: this package (service, models, scopes, validation, ranking), ``store/`` (LanceDB access),
``index/`` (the exact vector index) and ``embeddings/`` (providers). See docs/architecture.md.
"""
