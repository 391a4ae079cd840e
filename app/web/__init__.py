"""The dashboard served at ``/``: static files, no build step."""
