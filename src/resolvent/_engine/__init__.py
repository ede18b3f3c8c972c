"""The engine: what runs a plan, the interpreter or the code generated for it, which
of the two runs it, and the traced variant of both."""
