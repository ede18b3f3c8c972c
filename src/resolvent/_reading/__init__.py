"""Reading one function: its annotations, its kind, its parameters and markers, and
whether a declared type can hold what a resolver provides. One function at a time."""
