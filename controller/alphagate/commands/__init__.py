"""CLI command groups; each module exposes `register(app)`. Shell code: may do I/O."""
