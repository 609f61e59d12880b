"""The claims page (``docs/claims.md``), generated from the claims table.

``python -m tangentlab.claims_reference docs/claims.md`` writes it (``make docs`` too);
``--check`` exits 1 when the committed page differs from the table. One section per kind of
claim, one entry per claim: its statement, what the paper reported, the rule behind each status
word, the metrics it reads and, for a prediction, its truth in each planted scenario of the
end-to-end battery (or why it has none).
"""

from __future__ import annotations

from tangentlab.claims.table import CLAIMS, KIND_TITLES, KINDS, Claim

__all__ = ["render_claims"]


def _truths(c: Claim) -> list[str]:
    if c.kind != "prediction":
        return []
    if not c.validated_end_to_end:
        return [f"- **End to end:** {c.not_validated}."]
    planted = ", ".join(f"{name}: {truth}" for name, truth in c.planted.items())
    return [f"- **End to end:** {c.unplanted} in every scenario that does not plant it"
            + (f"; {planted}" if planted else "") + "."]


def _entry(c: Claim) -> list[str]:
    out = [f"### {c.title} (`{c.key}`)", "", c.statement, ""]
    if c.paper:
        out.append(f"- **The paper reported:** {c.paper}")
    out.append(f"- **Tested by:** {c.test}.")
    if c.metrics:
        out.append("- **Reads:** " + ", ".join(f"`{m}`" for m in c.metrics) + ".")
    if c.depends_on:
        out.append(f"- **Depends on** `{c.depends_on}`: not an independent verdict.")
    out += _truths(c)
    out += [f"- **Rule:** {c.rule_text}", ""]
    return out


def render_claims() -> str:
    """The whole page, as Markdown text."""
    out = ["# The claims", "",
           "Generated from `tangentlab.claims.table.CLAIMS` by "
           "`python -m tangentlab.claims_reference docs/claims.md`; do not edit by hand. Each claim "
           "is one row of the report. Adding one is a row in that table (and its rule, if new): "
           "see CONTRIBUTING.md.", ""]
    for kind in KINDS:
        out += [f"## {KIND_TITLES[kind]}", ""]
        for c in CLAIMS:
            if c.kind == kind:
                out += _entry(c)
    return "\n".join(out).rstrip() + "\n"
