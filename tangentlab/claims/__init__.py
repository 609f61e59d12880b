"""The claims the project tests, one row each, and the rules that decide them.

A leaf package (it imports nothing from tangentlab but :mod:`tangentlab.errors` and itself):
the report's builders, its gate, the end-to-end battery's scenarios and the docs all read it.

- :mod:`tangentlab.claims.table`: the :class:`~tangentlab.claims.table.Claim` record and
  :data:`~tangentlab.claims.table.CLAIMS`, in report order;
- :mod:`tangentlab.claims.rules`: the status words, ``combine()`` and the prediction rules, each
  with its text in ``RULES``; :mod:`tangentlab.claims.causal_rules`: the causal rows' rules;
  :mod:`tangentlab.claims.bridge_rules`: theory against measurement in numbers (the bridge);
- :mod:`tangentlab.claims.paper`: what the paper reported, per claim;
- :mod:`tangentlab.claims.fingerprints`: fingerprints of the modules a verdict runs through (what
  an end-to-end certificate covers).
"""

from __future__ import annotations

from tangentlab.claims.rules import RULES, STATUS_WORDS, Outcome, combine
from tangentlab.claims.table import CLAIMS, KIND_TITLES, KINDS, Claim, claim, claim_keys

__all__ = ["CLAIMS", "Claim", "KINDS", "KIND_TITLES", "RULES", "STATUS_WORDS", "Outcome",
           "claim", "claim_keys", "combine"]
