"""The vocabulary: what users write and get back (markers, outcomes, questions, errors,
scopes), the immutable record and the logger. It imports nothing of the package."""
