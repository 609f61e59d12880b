"""tangentlab.report (being built)."""
