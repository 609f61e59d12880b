"""tangentlab.theory (being built)."""
