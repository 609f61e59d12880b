"""tangentlab.empirical (being built)."""
