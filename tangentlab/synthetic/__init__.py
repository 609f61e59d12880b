"""tangentlab.synthetic (being built)."""
