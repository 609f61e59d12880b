"""The paper's tangent-proxy protocol over a trajectory (``measure``): its configuration and
pre-flight checks, the plan every checkpoint shares, the execution modes and ranks, the capture
passes, the tested subspaces and their controls, the metric and causal rows, the resumable
partial folder and the figures.
"""
