"""Models and what they are loaded from: corpora, tokenizers, eval batches, Hub ids and
revisions, checkpoint trajectories and their integrity, the family site table, named sites and
the hooks that capture them.

Nothing here trains or measures: :mod:`tangentlab.empirical.training` and
:mod:`tangentlab.empirical.measurement` build on these modules, never the other way round.
"""
