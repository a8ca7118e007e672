"""The lab's CLI commands; each module exposes `register(app)` and is named as an entry point
of the group `alphagate.commands` in lab/pyproject.toml, so `alphagate` lists it when the lab
is installed. Shell code: may do I/O."""
