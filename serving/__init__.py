"""Serving room: the OIP v2 model server, its client, the load generator, and manifests.

Importing the package imports nothing heavy: `promotion` uses only the
manifest builders, and the server modules load Paddle only when serving.
"""
