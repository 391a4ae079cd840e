"""Helpers the benchmark scripts share: ``common`` (results, tables, exact top-k, the vector cache), ``server``
(a real server process and the clients that load it), ``retrieval`` (the datasets through the service, metrics)."""
