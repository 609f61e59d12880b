"""tangentlab.measure (being built)."""
