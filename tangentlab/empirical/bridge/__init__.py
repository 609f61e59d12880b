"""Theory against measurement: the closed forms of :mod:`tangentlab.theory` at the inputs a
measurement estimates (``bridge.csv``), their planted-truth check and the optional pretrained
stage. The only room of :mod:`tangentlab.empirical` that imports :mod:`tangentlab.theory`.
"""
